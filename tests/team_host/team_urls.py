"""The team's URLs: its admin, its own NinjaAPI at /api/ (namespace `api`), the apps under
memory/ as the guide says."""

from django.contrib import admin
from django.urls import include, path
from team_api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("memory/", include("memory_app.urls")),
]

handler404 = "memory_app.api_edge.not_found"
handler500 = "memory_app.api_edge.server_error"
