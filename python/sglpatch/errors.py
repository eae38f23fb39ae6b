class SglpatchError(Exception):
    """A refusal or failure with a one-line reason for the user (exit 2)."""
