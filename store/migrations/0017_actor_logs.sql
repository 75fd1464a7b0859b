-- An actor's output (issue 29, `ate logs`; domain/logs.py): the lines its sandboxes printed, as the
-- atelets that ran it read and shipped them. `seq` is the order of arrival (one actor's lines are
-- appended one batch at a time, under a lock per actor, so it is also the order of commit); a node
-- ships each line once per (log_id, byte offset) of its log file, and a repeat after a lost answer
-- is ignored. The newest bytes are kept up to a bound per actor (store/actor_logs.py); the lines
-- go with the actor when it is deleted.
CREATE TABLE actor_log_lines (
    atespace  text NOT NULL,
    actor     text NOT NULL,
    seq       bigserial,
    time      timestamptz NOT NULL,     -- when the node read the line
    stream    text NOT NULL,
    node      text NOT NULL,
    worker    text NOT NULL,
    log_id    text NOT NULL,            -- the node's name for one log file of the actor
    "offset"  bigint NOT NULL,          -- the line's byte offset in that file
    line      text NOT NULL,
    PRIMARY KEY (atespace, actor, seq),
    UNIQUE (atespace, actor, node, log_id, "offset"),
    FOREIGN KEY (atespace, actor) REFERENCES actors (atespace, name) ON DELETE CASCADE
);
