-- Pending tasks counted by the delivery round instead of by each insert (docs/dev/storage.md,
-- "Pending tasks counted in arrears"): a publish's commit no longer writes the `task_counts`
-- page, one WAL page fewer per publish commit. The row ('', '') of `task_counts` (no app id is
-- empty) holds a mark M, a task id. The (app, 'pending') row counts the app's pending tasks
-- with id <= M; the app's pending tasks above M, the newest few, are counted when read through
-- `tasks_app_status` (app_id, 'pending', id > M). The triggers below count a pending task only
-- at or below M, so a new task (its id above M) leaves `task_counts` alone until the delivery
-- round (or every new block of task ids) raises M, counting the pending tasks it passes in the
-- same transaction. Every other status is counted as before. Twin of
-- migrations/postgres/pending_counted.sql (a comment: PostgreSQL counts rows).
DROP TRIGGER task_counts_insert;
DROP TRIGGER task_counts_status;
DROP TRIGGER task_counts_delete;
-- Every task held so far is counted: the mark starts at the highest id.
INSERT INTO task_counts (app_id, status, n)
    VALUES ('', '', (SELECT coalesce(max(id), 0) FROM tasks));
CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks
    WHEN new.status <> 'pending'
      OR new.id <= (SELECT n FROM task_counts WHERE app_id = '' AND status = '') BEGIN
    INSERT INTO task_counts (app_id, status, n) VALUES (new.app_id, new.status, 1)
        ON CONFLICT (app_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_status AFTER UPDATE OF app_id, status ON tasks
    WHEN old.status IS NOT new.status OR old.app_id IS NOT new.app_id BEGIN
    UPDATE task_counts SET n = n - 1 WHERE app_id = old.app_id AND status = old.status
        AND (old.status <> 'pending'
             OR old.id <= (SELECT n FROM task_counts WHERE app_id = '' AND status = ''));
    INSERT INTO task_counts (app_id, status, n) SELECT new.app_id, new.status, 1
        WHERE new.status <> 'pending'
           OR new.id <= (SELECT n FROM task_counts WHERE app_id = '' AND status = '')
        ON CONFLICT (app_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE app_id = old.app_id AND status = old.status
        AND (old.status <> 'pending'
             OR old.id <= (SELECT n FROM task_counts WHERE app_id = '' AND status = ''));
END;
