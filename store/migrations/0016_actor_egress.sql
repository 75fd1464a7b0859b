-- An actor's own egress policy (issue 28, domain/egress.py), within its template's: the document
-- form ({allow, credentials}); NULL: its template's policy applies.
ALTER TABLE actors ADD COLUMN egress_policy jsonb;
