from django.db import transaction
from django.http import Http404, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from deferq.contrib.django import app, enqueue_on_commit

from .models import Order
from .tasks import send_receipt


@require_POST
def place_order(request):
    with transaction.atomic():
        order = Order.objects.create(item=request.POST.get("item", "book"))
        # Stored with the order, or not at all; None when it waits for the commit.
        job = enqueue_on_commit(send_receipt, order.pk)
    return JsonResponse({"order": order.pk, "job": job.id if job else None}, status=201)


@require_GET
def job_status(request, job_id):
    job = app.get(job_id)
    if job is None:
        raise Http404("no such job")
    return JsonResponse({"id": job.id, "state": str(job.state), "result": job.result})
