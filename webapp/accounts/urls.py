from django.contrib.auth import views as auth_views
from django.urls import path

from webapp.accounts import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="accounts/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("teams/new/", views.team_create, name="team_create"),
    path("t/<slug:team_slug>/team/", views.team_settings, name="team_settings"),
    path("t/<slug:team_slug>/team/invite/", views.invite_create, name="invite_create"),
    path("t/<slug:team_slug>/team/members/<int:user_id>/role/", views.member_role, name="member_role"),
    path("t/<slug:team_slug>/team/members/<int:user_id>/remove/", views.member_remove, name="member_remove"),
    path("invites/<str:token>/", views.invite_accept, name="invite_accept"),
    path("account/tokens/", views.tokens, name="tokens"),
    path("account/tokens/<int:token_id>/revoke/", views.token_revoke, name="token_revoke"),
]
