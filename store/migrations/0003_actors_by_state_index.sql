-- Listing actors of one state (RUNNING ones, for `ate dev`'s stop and operators) walks this
-- index in key order instead of every actor.
CREATE INDEX actors_state_idx ON actors (state, atespace, name);
