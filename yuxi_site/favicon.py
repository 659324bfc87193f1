"""`/favicon.ico`: browsers ask for it on every site whatever the page names, and a 404 there
fills the logs and the browser's console."""

from pathlib import Path

from django.http import FileResponse, HttpRequest
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

__all__ = ["favicon"]

# The site's icon (32x32, the page's accent colour), shipped beside the site's code.
FAVICON = Path(__file__).resolve().parent / "static" / "favicon.ico"


@require_safe
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> FileResponse:
    """The icon, cached for a day (it holds nothing of a user's)."""
    return FileResponse(FAVICON.open("rb"), content_type="image/x-icon")
