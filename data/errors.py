"""The builders' error, in a module of its own so that TensorFlow-free tools (the box CSV
converter) can raise it without loading the shard writer."""

from common import cli


class BuildError(cli.UserError):
    """The builder's input or output directory cannot be used; the message says what to do."""
