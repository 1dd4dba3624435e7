"""The bench's table of workloads: ``workloads.toml`` holds each workload's text (title,
the figures it compares with its peers', notes, goals with the issue that set each),
``registry`` the code (which function measures each, what it takes from the command
line) and builds the table in order; ``fill`` fills in the names the text uses."""
