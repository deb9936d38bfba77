"""The error a user's configuration raises: its own module, so that any layer can raise it without importing
the config (the engine choice, below the config, names the setting it refuses)."""


class ConfigError(ValueError):
    """A configuration value is unknown, ill-typed or inconsistent."""
