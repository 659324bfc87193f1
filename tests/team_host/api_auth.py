# api_auth.py: bearer tokens your project already issues, for the memory API
from ninja.security import HttpBearer

from accounts.models import ApiToken  # wherever your project keeps its tokens


class BearerTokenAuth(HttpBearer):
    """`Authorization: Bearer <key>`: the token's user, or None (the API answers 401)."""

    def authenticate(self, request, token):
        found = ApiToken.objects.select_related("user").filter(key=token).first()
        return found.user if found else None
