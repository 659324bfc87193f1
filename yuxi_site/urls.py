"""The site's URLs: the admin, the login pages, the API, health, and the error handlers."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from memory_app.api import api_urls
from yuxi_site.health import healthz

# The staff site's name, on every admin page (Django's default says "Django administration").
admin.site.site_header = "Yuxi Memory"
admin.site.site_title = "Yuxi Memory staff"
admin.site.index_title = "Users, memory and conversations"

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(template_name="accounts/login.html", next_page="/api/docs"),
        name="login",
    ),
    path(
        "accounts/logout/",
        auth_views.LogoutView.as_view(template_name="accounts/logged_out.html"),
        name="logout",
    ),
    path("api/", api_urls()),
    path("healthz", healthz, name="healthz"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]

handler404 = "yuxi_site.errors.not_found"
handler500 = "yuxi_site.errors.server_error"
