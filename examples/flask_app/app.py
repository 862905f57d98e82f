"""Flask example: the extension is declared before the app (tasks too), and the app
factory configures it from DEFERQ_URL.

    pip install 'deferq[flask]'
    DEFERQ_URL=sqlite:///deferq.db flask --app app run
    DEFERQ_URL=sqlite:///deferq.db deferq worker --app app:deferq_ext
    curl -X POST localhost:5000/signup -H 'content-type: application/json' -d '{"email": "a@example.com"}'
"""

import os

from flask import Blueprint, Flask, abort, request

from deferq.contrib.flask import Deferq

deferq_ext = Deferq()  # a deferq.App, pointed at its store by init_app
shop = Blueprint("shop", __name__)


@deferq_ext.task(queue="email", max_attempts=5)
def send_welcome(email: str) -> str:
    # ... hand the e-mail to your provider here ...
    return f"welcome mail sent to {email}"


@shop.post("/signup")
def signup():
    job = send_welcome.enqueue(request.get_json()["email"])
    return {"job": job.id, "state": str(job.state)}, 202


@shop.get("/jobs/<job_id>")
def job_status(job_id: str):
    job = deferq_ext.get(job_id)
    if job is None:
        abort(404)
    return {"id": job.id, "state": str(job.state), "result": job.result}


def create_app(config: dict | None = None) -> Flask:
    app = Flask(__name__)
    app.config["DEFERQ_URL"] = os.environ.get("DEFERQ_URL", "sqlite:///deferq.db")
    app.config.update(config or {})
    deferq_ext.init_app(app)
    app.register_blueprint(shop)
    return app
