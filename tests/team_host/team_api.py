"""The team's own API: a NinjaAPI at /api/ under the URL namespace `api`, no auth, no CSRF."""

from ninja import NinjaAPI

api = NinjaAPI(title="Team API", urls_namespace="api")


@api.get("/ping", url_name="ping")
def ping(request):
    return {"pong": True}


@api.post("/echo", url_name="echo")
def echo(request):
    return {"content_type": request.content_type, "body": request.body.decode()}
