"""TF_CONFIG as TensorFlow reads it, checked without TensorFlow installed.

    ddplaunch --nproc-per-node 2 --env-style tf -- examples/tf_config_check.py
    ddplaunch --nproc-per-node 4 --tf-chief --tf-ps 1 -- examples/tf_config_check.py

MultiWorkerMirroredStrategy and ParameterServerStrategy take the cluster and
this task from TF_CONFIG (tf.distribute.cluster_resolver.TFConfigClusterResolver).
The checks are TensorFlow's rules: known task types, at most one chief, this
task's index within its list, every address host:port. Prints this task and a
fingerprint of the cluster, which must be the same on every rank.
"""
import hashlib
import json
import os
import sys

tf_config = json.loads(os.environ["TF_CONFIG"])
cluster, task = tf_config["cluster"], tf_config["task"]
assert set(cluster) <= {"chief", "worker", "ps", "evaluator"}, cluster.keys()
assert len(cluster.get("chief", [])) <= 1, "at most one chief"
assert task["type"] in cluster, f"{task['type']} is not in the cluster"
assert 0 <= task["index"] < len(cluster[task["type"]]), "index out of its list"
for addresses in cluster.values():
    for address in addresses:
        host, _, port = address.rpartition(":")
        assert host and 0 < int(port) < 65536, address
if "ps" in cluster:
    assert "chief" in cluster or "worker" in cluster, "ParameterServerStrategy needs a coordinator"
fingerprint = hashlib.sha256(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:12]
print(f"task {task['type']}:{task['index']} rank {os.environ['RANK']} cluster {fingerprint}")
sys.exit(0)
