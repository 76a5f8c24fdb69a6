-- Exact task totals at any size (docs/dev/storage.md "Task totals and the tasks indexes"):
-- per-(app, status) counters kept by triggers in the transaction of every insert, status
-- change and delete of a task, so that `GET /tasks` reads its `total` from here instead of
-- counting the matching rows. SQLite only: PostgreSQL keeps counting (see that section).
CREATE TABLE task_counts (
    app_id TEXT NOT NULL,
    status TEXT NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (app_id, status)
) WITHOUT ROWID;

INSERT INTO task_counts (app_id, status, n)
    SELECT app_id, status, count(*) FROM tasks GROUP BY app_id, status;

-- Triggers rather than statements in each query: a query added later that inserts, deletes or
-- changes the status of tasks cannot forget them.
CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts (app_id, status, n) VALUES (new.app_id, new.status, 1)
        ON CONFLICT (app_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_status AFTER UPDATE OF app_id, status ON tasks
    WHEN old.status IS NOT new.status OR old.app_id IS NOT new.app_id BEGIN
    UPDATE task_counts SET n = n - 1 WHERE app_id = old.app_id AND status = old.status;
    INSERT INTO task_counts (app_id, status, n) VALUES (new.app_id, new.status, 1)
        ON CONFLICT (app_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE app_id = old.app_id AND status = old.status;
END;

-- Fewer indexes to write per task. tasks_endpoint keyed (endpoint_id, status) changed on every
-- status update; (endpoint_id, id) does not, and gives the list filtered by endpoint its page
-- in order. tasks_due: no query reads it (claims go endpoint by endpoint through
-- tasks_endpoint_due). tasks_leased: SQLite never leases, and the start-up hand-back of running
-- tasks finds them through task_counts and tasks_app_status. tasks_app stays: it gives the
-- list by app alone (or by type) its page without sorting every task of the app.
DROP INDEX tasks_endpoint;
CREATE INDEX tasks_endpoint ON tasks (endpoint_id, id);
DROP INDEX tasks_due;
DROP INDEX tasks_leased;
