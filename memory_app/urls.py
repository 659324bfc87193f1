"""The app's URLs, for a host to `include` under any prefix: the user's page at the include's
root, the fragments it loads, and the JSON API under `api/`."""

from django.urls import path

from memory_app import views
from memory_app.api import api_urls

urlpatterns = [
    path("", views.page, name="memory_page"),
    path("page/threads/", views.threads_fragment, name="memory_page_threads"),
    path(
        "page/threads/<str:thread_id>/messages/",
        views.messages_fragment,
        name="memory_page_messages",
    ),
    path("page/memory/", views.memory_fragment, name="memory_page_memory"),
    path(
        "page/memory/versions/<str:sha256>/diff/",
        views.version_diff_fragment,
        name="memory_page_diff",
    ),
    path("api/", api_urls()),
]
