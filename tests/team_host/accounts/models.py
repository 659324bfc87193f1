"""Django's documented email-login `AbstractBaseUser` (no username, no first or last name, no
is_active field), and the bearer tokens the team already issues to its API clients."""

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models


class EmailUserManager(BaseUserManager):
    def create_user(self, email, password=None, **extra):
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email, password=None, **extra):
        return self.create_user(email, password, is_staff=True, is_superuser=True, **extra)


class EmailUser(AbstractBaseUser, PermissionsMixin):
    email = models.EmailField(unique=True)
    date_of_birth = models.DateField(null=True, blank=True)
    is_staff = models.BooleanField(default=False)

    objects = EmailUserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS = []

    def __str__(self):
        return self.email


class ApiToken(models.Model):
    key = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(EmailUser, on_delete=models.CASCADE, related_name="api_tokens")

    def __str__(self):
        return f"token of {self.user}"
