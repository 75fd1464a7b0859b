-- Worker pods (Kubernetes): the pod syncer of ate-controller keeps a node (one atelet, one worker
-- per pod) out of placement while its pod is not Ready, and retires it when the pod is deleted:
-- a retired node never registers again (a late heartbeat must not bring back a deleted worker).
ALTER TABLE nodes ADD COLUMN pod_not_ready boolean NOT NULL DEFAULT false;
ALTER TABLE nodes ADD COLUMN retired_at timestamptz;
ALTER TABLE nodes ADD COLUMN worker_pod boolean NOT NULL DEFAULT false;  -- made by the pod syncer
