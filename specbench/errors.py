class SpecbenchError(Exception):
    """Bad input or configuration: the CLI prints the message on one line and exits non-zero."""
