"""Run one Ray worker node on 127.0.0.1 in this process's own environment (e.g. its own mount namespace),
joined to the cluster whose GCS is at ``sys.argv[1]``, until terminated.

    python tests/engine/_ray_node.py 127.0.0.1:PORT [NUM_CPUS]

``ray start --address`` would put the node on the machine's address; this keeps it on loopback.
"""

import signal
import sys

import ray._private.node
import ray._private.parameter


def main() -> None:
    params = ray._private.parameter.RayParams(
        gcs_address=sys.argv[1],
        node_ip_address="127.0.0.1",
        num_cpus=int(sys.argv[2]) if len(sys.argv) > 2 else 1,
        num_gpus=0,
        object_store_memory=150 * 1024 * 1024,
        min_worker_port=0,
        max_worker_port=0,
        include_log_monitor=False,
        node_manager_port=0,
    )
    params.dashboard_agent_listen_port = None
    ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
