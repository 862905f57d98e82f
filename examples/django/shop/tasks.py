"""Imported by deferq's AppConfig.ready(), like every installed app's tasks.py."""

from deferq.contrib.django import app

from .models import Order


@app.task(queue="email", max_attempts=5)
def send_receipt(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)  # committed with the job, so it is there
    # ... hand the e-mail to your provider here ...
    Order.objects.filter(pk=order_id).update(receipt_sent=True)
    return f"receipt sent for order {order.pk} ({order.item})"
