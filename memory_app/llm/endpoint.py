"""Which model a call went to, said for errors and staff without a key or a path."""

from urllib.parse import urlsplit


def model_endpoint(model: object) -> str:
    """Which model a call went to, for errors and staff: its name and, for a remote one, the
    endpoint's host and port (`gpt-4o-mini at api.example.com`), never a key or a path."""
    name = getattr(model, "model_name", None) or type(model).__name__
    base = getattr(model, "openai_api_base", None)
    if not isinstance(base, str) or not base:
        return str(name)
    parts = urlsplit(base)
    host = parts.hostname or "?"
    return f"{name} at {host}:{parts.port}" if parts.port else f"{name} at {host}"
