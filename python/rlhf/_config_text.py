"""The config handed to the C library, as text: JSON written so that the C side's YAML reader
(YAML 1.1 scalars, as PyYAML reads them) sees exactly the values meant.

JSON is YAML's flow syntax, with one trap: YAML 1.1 reads `1e-05` as a string (a float needs a
dot and a signed exponent), so floats are written as `1.0e-05`.
"""

import json
import math


def _float(x):
    if math.isnan(x):
        return ".nan"
    if math.isinf(x):
        return ".inf" if x > 0 else "-.inf"
    text = repr(float(x))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent and exponent[0] not in "+-":
        exponent = "+" + exponent
    return mantissa + ("e" + exponent if exponent else "")


def config_text(value):
    """value (dicts, lists, str, int, float, bool, None) as YAML flow text."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))}: {config_text(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(config_text(v) for v in value) + "]"
    if hasattr(value, "item"):  # numpy scalars
        return config_text(value.item())
    raise TypeError(f"a config value of type {type(value).__name__} cannot be passed to rlhf.c")
