"""The app's URLs, for a host to include under any prefix it likes:
`path("memory/", include("memory_app.urls"))` serves the user's page at `/memory/`, the
fragments it loads under `/memory/page/`, and the API at `/memory/api/` (its OpenAPI document
at `/memory/api/openapi.json`, Swagger UI at `/memory/api/docs`). The reference site includes it
at the root, so the page is at `/` and the API at `/api/` there.

Nothing in the app assumes where it is mounted: links, the OpenAPI paths and the JSON edge find
the API's path by reversing its own namespace. Every name is in the namespace `yuxi_memory`
(`reverse("yuxi_memory:memory_page")`), the API's in `yuxi_memory:memory_api`, so a host's own
names, its own `api` namespace included, stay its own.
"""

from django.urls import URLPattern, URLResolver, path

from memory_app import views
from memory_app.api import api_urls
from memory_app.api_edge import URL_NAMESPACE

app_name = URL_NAMESPACE

urlpatterns: list[URLPattern | URLResolver] = [
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
    path("page/approvals/", views.approvals_fragment, name="memory_page_approvals"),
    path("page/search/", views.search_fragment, name="memory_page_search"),
    path("api/", api_urls()),
]
