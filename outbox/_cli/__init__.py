"""The subcommands of ``outbox``, one module each, and what they share."""
