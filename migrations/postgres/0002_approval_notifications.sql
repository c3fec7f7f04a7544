-- Every new approval is announced on the channel toolhost_approvals (its id as the payload), so
-- the other hosts apply it within a second instead of polling.
CREATE FUNCTION toolhost_announce_approval() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('toolhost_approvals', NEW.id::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER approvals_announced AFTER INSERT ON approvals
    FOR EACH ROW EXECUTE FUNCTION toolhost_announce_approval();
