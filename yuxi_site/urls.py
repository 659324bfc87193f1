from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from memory_app.views import chat_view
from yuxi_site.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/chat/", chat_view, name="chat"),
    path("healthz", healthz, name="healthz"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
