"""The settings floor: what ``korvet serve`` can be told, read, checked and typed.

    values.py    every setting declared once (``SETTINGS``), the raw values by name (``Config``)
    load.py      defaults < YAML < ``KORVET_*`` environment < flags; the original's names
    validate.py  refusals that name the setting; builds the typed settings once they pass
    security.py  listeners, TLS, SASL, ACL policy, tenants: parsed and checked
    typed.py     ``BrokerSettings``: frozen, one typed attribute per setting

The broker is handed a ``BrokerSettings`` and reads ``settings.redis.wait_replicas``, never
a setting by its dotted name. This package stands below ``korvet.server`` and imports only
``korvet.core`` (pyproject.toml's import contracts).
"""

from korvet.settings.load import add_arguments, from_args, load
from korvet.settings.security import SecuritySettings, SecuritySettingsError
from korvet.settings.typed import BrokerSettings
from korvet.settings.values import SETTINGS, Config, ConfigError, Setting, describe

__all__ = [
    "SETTINGS",
    "BrokerSettings",
    "Config",
    "ConfigError",
    "SecuritySettings",
    "SecuritySettingsError",
    "Setting",
    "add_arguments",
    "describe",
    "from_args",
    "load",
]
