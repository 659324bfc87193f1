"""A host project's URLconf, as `docs/integration.md` writes it: the apps under `memory/`."""

from django.urls import include, path

urlpatterns = [
    path("memory/", include("memory_app.urls")),
]

handler404 = "memory_app.api_edge.not_found"
handler500 = "memory_app.api_edge.server_error"
