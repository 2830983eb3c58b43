from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [("tether", "0001_tether_schema")]
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("item", models.CharField(max_length=100)),
                ("confirmed", models.BooleanField(default=False)),
            ],
        ),
    ]
