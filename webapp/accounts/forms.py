"""Forms for the accounts pages. Rules about teams, roles and tokens live in the services; these
forms only parse what a person typed."""

from __future__ import annotations

from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User

from webapp.accounts.models import Role


class SignupForm(UserCreationForm):
    email = forms.EmailField(help_text="Team owners invite you by this address.")
    team_name = forms.CharField(
        max_length=100,
        required=False,
        label="Team name",
        help_text="Your first team; leave empty to call it after your username (“alice's team” for alice).",
    )

    class Meta(UserCreationForm.Meta):
        model = User
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip().lower()
        if User.objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("An account with this email exists already; log in instead.")
        return email


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100, label="Team name")


class InviteForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “laptop” or “CI”.")
