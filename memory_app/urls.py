"""The app's URLs, for a host to include under any prefix it likes:
`path("memory/", include("memory_app.urls"))` serves the API at `/memory/api/` (its OpenAPI
document at `/memory/api/openapi.json`, Swagger UI at `/memory/api/docs`). The reference site
includes it at the root, so the API is at `/api/` there.

Nothing in the app assumes where it is mounted: links, the OpenAPI paths and the JSON edge find
the API's path by reversing the `api` namespace.
"""

from django.urls import URLPattern, URLResolver, path

from memory_app.api import api_urls

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/", api_urls()),
]
