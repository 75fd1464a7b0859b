-- Pull progress (issue 29): the latest look a node reported at its pull of a registry image
-- (layers and bytes, as domain/image_pulls.py says), shown by a Pending template that runs the
-- image. One row per node and image, replaced at each report; deleted with its node.
CREATE TABLE image_pulls (
    node         text NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    image        text NOT NULL,
    state        text NOT NULL CHECK (state IN ('Pulling', 'Pulled', 'Failed')),
    layers       integer NOT NULL CHECK (layers >= 0),
    bytes_total  bigint NOT NULL CHECK (bytes_total >= 0),
    bytes_done   bigint NOT NULL CHECK (bytes_done >= 0),
    message      text NOT NULL DEFAULT '',
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node, image)
);
