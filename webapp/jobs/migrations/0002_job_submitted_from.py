from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="submitted_from",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
