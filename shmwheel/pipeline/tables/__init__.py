"""The pipeline's second stage: from events to results. One row per timer (``pertimer``,
``timers``), the per-second figures (``seconds``, ``histogram``), the figures of the report
(``figures``), the audit's rules (``audit``) and the jobs' rules on the jobs' ledgers
(``jobs``); ``asnumpy`` turns Arrow columns into
NumPy arrays for them."""
