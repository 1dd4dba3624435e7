"""The pipeline's second stage: from events to results. One row per timer (``pertimer``,
``timers``), the per-second figures (``seconds``, ``histogram``), the figures of the report
(``figures``) and the audit's rules (``audit``); ``asnumpy`` turns Arrow columns into
NumPy arrays for them."""
