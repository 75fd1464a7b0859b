"""`ate controller`: the Kubernetes side of ate. WorkerPool resources become Deployments of worker
pods (`pools`, `deployments`), worker pods become worker records and drains (`pods`), and the
workers of each pool are exported for autoscaling (`metrics`)."""
