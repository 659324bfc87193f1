"""The site's URLs: the admin, the login pages, the API, health, and the error handlers."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from yuxi_site.health import healthz

# Changelists need the page's width for their columns more than a list of every app beside them
# (the home page and breadcrumbs still list the apps).
admin.site.enable_nav_sidebar = False

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            template_name="accounts/login.html", next_page="api:openapi-view"
        ),
        name="login",
    ),
    path(
        "accounts/logout/",
        auth_views.LogoutView.as_view(template_name="accounts/logged_out.html"),
        name="logout",
    ),
    # The apps' URLs (the API at api/), included at the root as a host would under a prefix.
    path("", include("memory_app.urls")),
    path("healthz", healthz, name="healthz"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]

handler404 = "memory_app.api_edge.not_found"
handler500 = "memory_app.api_edge.server_error"
