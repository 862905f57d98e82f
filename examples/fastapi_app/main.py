"""FastAPI example: endpoints enqueue with `await task.enqueue_async(...)`; the store is
opened when the server starts and closed when it stops.

    pip install 'deferq[fastapi]' uvicorn
    DEFERQ_URL=sqlite:///deferq.db uvicorn main:api        # the web app
    DEFERQ_URL=sqlite:///deferq.db deferq worker --app main:jobs
    curl -X POST localhost:8000/signup -H 'content-type: application/json' -d '{"email": "a@example.com"}'
"""

import asyncio

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import deferq
from deferq.contrib.starlette import deferq_lifespan

jobs = deferq.App()  # DEFERQ_URL, else sqlite:///deferq.db


@jobs.task(queue="email", max_attempts=5)
def send_welcome(email: str) -> str:
    # ... hand the e-mail to your provider here ...
    return f"welcome mail sent to {email}"


api = FastAPI(lifespan=deferq_lifespan(jobs))


class Signup(BaseModel):
    email: str


@api.post("/signup", status_code=202)
async def signup(body: Signup) -> dict:
    job = await send_welcome.enqueue_async(body.email)
    return {"job": job.id, "state": str(job.state)}


@api.get("/jobs/{job_id}")
async def job_status(job_id: str) -> dict:
    job = await asyncio.to_thread(jobs.get, job_id)  # the admin API is sync: off the loop
    if job is None:
        raise HTTPException(status_code=404, detail="no such job")
    return {"id": job.id, "state": str(job.state), "result": job.result}
