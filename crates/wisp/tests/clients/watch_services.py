"""The Python `kubernetes` client against wisp: CustomObjectsApi list and watch of
services.serving.knative.dev over TLS, trusting the CA from wisp's data dir.

Usage: watch_services.py HOST CA_FILE TOKEN NAME
Prints one JSON line: the names listed, then the watch events seen for NAME."""

import json
import sys
import threading

from kubernetes import client, watch

host, ca, token, name = sys.argv[1:5]
cfg = client.Configuration()
cfg.host = host
cfg.ssl_ca_cert = ca
cfg.api_key = {"authorization": "Bearer " + token}
api = client.CustomObjectsApi(client.ApiClient(cfg))
args = ("serving.knative.dev", "v1", "default", "services")

listed = api.list_namespaced_custom_object(*args)
rv = listed["metadata"]["resourceVersion"]


def mutate():
    body = {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"image": "example.com/hello"}]}}},
    }
    api.create_namespaced_custom_object(*args, body)
    # The controller writes the status meanwhile: retry on 409, as clients do.
    for _ in range(50):
        obj = api.get_namespaced_custom_object(*args[:3], "services", name)
        obj["metadata"].setdefault("labels", {})["from"] = "python"
        try:
            api.replace_namespaced_custom_object(*args[:3], "services", name, obj)
            return
        except client.exceptions.ApiException as e:
            if e.status != 409:
                raise


events = []
w = watch.Watch()
# The watch starts from the list's resourceVersion, so the writes are seen even when they
# land before the watch request does.
writer = threading.Thread(target=mutate)
writer.start()
for ev in w.stream(api.list_namespaced_custom_object, *args,
                   resource_version=rv, timeout_seconds=30):
    obj = ev["object"]
    if obj["metadata"]["name"] != name:
        continue
    events.append({
        "type": ev["type"],
        "resourceVersion": obj["metadata"]["resourceVersion"],
        "labels": obj["metadata"].get("labels", {}),
    })
    if ev["type"] == "MODIFIED" and events[-1]["labels"].get("from") == "python":
        w.stop()
        break
    if len(events) > 50:
        break
writer.join()
print(json.dumps({"listed": [i["metadata"]["name"] for i in listed["items"]],
                  "events": events}))
