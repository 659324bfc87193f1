"""The site's URLs: the admin, the login pages, the language switch, health, the app (its
page at `/`, its API under `/api/`), and the error handlers."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from yuxi_site import user_admin
from yuxi_site.favicon import favicon
from yuxi_site.health import healthz

# The staff site's name, on every admin page (Django's default says "Django administration").
admin.site.site_header = "Yuxi Memory"
admin.site.site_title = "Yuxi Memory staff"
admin.site.index_title = "Users, memory and conversations"
# Changelists need the page's width for their columns more than a list of every app beside them
# (the home page and breadcrumbs still list the apps).
admin.site.enable_nav_sidebar = False
# The site's own User and Group admins (superuser writes; a User's delete erases their data).
user_admin.register()

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(template_name="accounts/login.html"),
        name="login",
    ),
    path(
        "accounts/logout/",
        auth_views.LogoutView.as_view(template_name="accounts/logged_out.html"),
        name="logout",
    ),
    path("i18n/", include("django.conf.urls.i18n")),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
    path("", include("memory_app.urls")),
]

handler404 = "memory_app.api_edge.not_found"
handler500 = "memory_app.api_edge.server_error"
