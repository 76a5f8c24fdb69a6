#!/usr/bin/env python3
"""Where a PostgreSQL server's CPU (or webhookd's) went, from `perf script -F
comm,pid,tid,ip,sym,dso` of a `perf record -e cpu-clock -g` run (scripts/profile-pg.sh).

usage: scripts/perf-pg-report.py postgres|webhookd|harness PIDS_FILE UNITS UNIT < script.txt

Counts only the samples of the processes in PIDS_FILE (one pid a line) and prints (for the
harness, only the first line: its CPU per unit), as shares
of those samples and as CPU-ms per unit (UNITS: how many UNITs, deliveries or requests, the
sampled window served; a sample is PERIOD_MS of CPU, 1 ms at `perf record -F 1000`):
  1. by component: each sample charged to the component of the frame nearest its leaf that
     names one (postgres: the table below; webhookd: its crate/module), so the rows add up to
     100 %;
  2. inclusive shares of the functions that matter (a sample counts once for every function
     on its chain): plan, executor, commit, client I/O, ...;
  3. the leaf symbols (self time), top 30.
The postgres binary Debian ships is stripped: its exported functions are named from the
dynamic symbol table, static ones are not (they show as the library's address, and fall to
their nearest named caller in table 1)."""
import collections
import os
import re
import sys

who, pids_file, units, unit = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
PERIOD_MS = float(os.environ.get("PERIOD_MS", "1"))
pids = set(open(pids_file).read().split())

# postgres: component, regex on one frame (symbol). Ordered from the specific to the general:
# the first rule matching the frame nearest the leaf wins.
PG_RULES = [
    ("commit: WAL flush (XLogFlush, fdatasync)", r"^(XLogFlush|XLogWrite|issue_xlog_fsync|pg_fdatasync|fdatasync|__libc_fdatasync|fsync)$"),
    ("WAL insert (XLogInsert, record assembly)", r"^(XLogInsert|XLogInsertRecord|XLogRegister\w*|XLogBeginInsert|CopyXLogRecordToWAL|ReserveXLogInsertLocation|log_heap_new_cid|XLogResetInsertion|XLogRecordAssemble)"),
    ("locks (relation locks, LWLocks, buffer content locks)", r"^(LockAcquire\w*|LockRelease\w*|LockRelationOid|UnlockRelationId|LockRelation\w*|XactLockTableWait|LockTuple|LockBuffer|LWLockAcquire|LWLockRelease|LockReleaseAll|GrantLock|ProcSleep|LockCheckConflicts|VirtualXactLockTableInsert|VirtualXactLockTableCleanup)$"),
    ("catalog / relation / type caches", r"^(SearchCatCache\w*|SearchSysCache\w*|RelationIdGetRelation|RelationBuildDesc|relation_open|try_relation_open|table_open|index_open|RelationClose|relation_close|getTypeIOParam|get_\w+|lookup_type_cache|CatalogCacheIdInvalidate|AcceptInvalidationMessages|ReleaseCatCache|ReleaseSysCache|RelationGetIndexList|RelationGetIndexAttrBitmap)$"),
    ("JSON / jsonb", r"(json|Json)"),
    ("text comparison / collation", r"^(texteq|textne|bttextcmp|varstr_cmp|text_cmp|varstrfastcmp\w*|bpchareq|hashtext|pg_newlocale_from_collation|lc_collate_is_c|texteqfast|nameeq|btnamecmp|texteq)$"),
    ("set_config / GUC", r"^(set_config\w*|set_config_option\w*|AtEOXact_GUC|NewGUCNestLevel|AtStart_GUC|parse_and_validate_value|call_\w+_check_hook)$"),
    ("index insert (btree)", r"^(btinsert|_bt_\w+|index_insert|ExecInsertIndexTuples)$"),
    ("heap insert / update", r"^(heap_insert|heap_update|heap_multi_insert|heapam_tuple_\w+|RelationGetBufferForTuple|heap_prepare_insert|simple_heap_\w+|table_tuple_\w+|ExecInsert|ExecUpdate|heap_page_prune\w*|heap_hot_search\w*)$"),
    ("index / heap scans", r"^(index_getnext\w*|index_beginscan\w*|index_rescan|index_endscan|btgettuple|btbeginscan|btrescan|btendscan|IndexNext\w*|ExecIndexScan|ExecIndexOnlyScan|heap_fetch|heapam_index_fetch_tuple|heap_getnext|SeqNext|ExecSeqScan|heapgettup\w*|_bt_first|_bt_search|_bt_binsrch|_bt_compare|_bt_next|_bt_readpage)$"),
    ("buffer manager", r"^(ReadBuffer\w*|ReleaseBuffer|UnlockReleaseBuffer|MarkBufferDirty\w*|PinBuffer\w*|UnpinBuffer\w*|BufTableLookup|StartBufferIO|LockBufferForCleanup|ConditionalLockBuffer|BufferGetBlockNumber|IncrBufferRefCount)$"),
    ("plan: parse / analyze / plan (incl. custom plans)", r"^(raw_parser|base_yyparse|parse_analyze\w*|pg_analyze_and_rewrite\w*|pg_plan_queries|pg_plan_query|planner|standard_planner|subquery_planner|BuildCachedPlan|RevalidateCachedQuery|transform\w*|QueryRewrite|pg_rewrite_query|grouping_planner|query_planner|create_plan|set_plan_references)$"),
    ("plan cache: fetch + bind (GetCachedPlan, exec_bind_message)", r"^(GetCachedPlan|CheckCachedPlan|AcquireExecutorLocks|AcquirePlannerLocks|exec_bind_message|CreatePortal|PortalDefineQuery|PortalStart|PortalDrop|PortalCleanup|MarkPortalDone|ReleaseCachedPlan|CopyParamList|makeParamList|OidInputFunctionCall|ReceiveFunctionCall|InputFunctionCall|array_recv|array_in|int8recv|textrecv|int4recv)$"),
    ("executor start / end (plan tree built per execution)", r"^(standard_ExecutorStart|ExecutorStart|InitPlan|ExecInit\w+|ExecAssign\w*|ExecBuild\w*|ExecReadyExpr|ExecInitExpr\w*|ExecTypeFromTL|standard_ExecutorEnd|ExecutorEnd|ExecEndNode|ExecEnd\w+|ExecCloseIndices|ExecOpenIndices|ExecCloseResultRelations|ExecCleanUpTriggerState|FreeExecutorState|CreateExecutorState|ExecInitRangeTable|ExecGetRangeTableRelation|ExecCheckRTPerms|AfterTriggerEndQuery|AfterTriggerBeginQuery)$"),
    ("executor run (expressions, CTEs, init-plans, projection)", r"^(standard_ExecutorRun|ExecutorRun|ExecutePlan|ExecProcNode\w*|ExecScan\w*|ExecInterpExpr\w*|ExecEvalExpr\w*|ExecProject|ExecModifyTable|ExecNestLoop|ExecResult|ExecCteScan|CteScanNext|ExecSetParamPlan|ExecSubPlan|ExecMaterial|ExecFunctionScan|FunctionNext|ExecMakeTableFunctionResult|array_unnest|ExecValuesScan|ValuesNext|ExecHashJoin|ExecAgg|ExecLimit|ExecLockRows|standard_ExecutorFinish|ExecutorFinish|ExecPostprocessPlan|ExecStoreTuple\w*|ExecFetchSlot\w*|ExecCopySlot\w*|tts_\w+|slot_\w+|heap_form_tuple|heap_deform_tuple|ExecEvalParamExec)$"),
    ("commit / transaction bookkeeping", r"^(CommitTransaction\w*|StartTransaction\w*|AbortTransaction|RecordTransactionCommit|ProcArrayEndTransaction|ProcArrayGroupClearXid|TransactionIdCommitTree|TransactionIdSetTreeStatus|GetSnapshotData|GetTransactionSnapshot|AssignTransactionId|GetNewTransactionId|ExtendCLOG|ResourceOwner\w+|AtEOXact_\w+|AtCommit_\w+|PreCommit_\w+|CallXactCallbacks|finish_xact_command|start_xact_command|PushActiveSnapshot|PopActiveSnapshot|RegisterSnapshot\w*|UnregisterSnapshot\w*|SnapshotResetXmin|pgstat_\w+|smgr\w+|PortalRunUtility|xact_redo\w*|SyncRepWaitForLSN|WaitLatch\w*|SetLatch|ProcessCompletedNotifies|PreventInTransactionBlock|AtEOXact_GUC)$"),
    ("client I/O: receive (pq_getbyte, secure_read, epoll)", r"^(secure_read|pq_getbyte|pq_getmessage|pq_recvbuf|pq_startmsgread|pq_getmsg\w*|SocketBackend|ReadCommand|be_tls_read|__libc_recv|recv|epoll_wait|WaitEventSetWait\w*|__GI_epoll_wait|__epoll_wait)$"),
    ("client I/O: send (pq_flush, secure_write)", r"^(secure_write|internal_flush|pq_flush\w*|socket_flush\w*|pq_putmessage\w*|socket_putmessage\w*|pq_endmessage\w*|pq_send\w*|printtup\w*|SendRowDescriptionMessage|EndCommand|ReadyForQuery|__libc_send|send|__send|sendto|__sendto)$"),
    ("memory (palloc, contexts)", r"^(palloc\w*|pfree|repalloc|MemoryContext\w+|AllocSet\w+|GenerationAlloc|SlabAlloc|_int_malloc|_int_free|malloc|free|cfree|__libc_malloc|__libc_free|memcpy|__memmove\w*|__memset\w*|__memcpy\w*)$"),
    ("hash tables", r"^(hash_search\w*|hash_seq_\w+|hash_any\w*|hash_bytes\w*|tag_hash|string_hash|uint32_hash)$"),
    ("statistics (pg_stat_statements)", r"^(pgss_\w+|pg_stat_statements\w*|pgstat_report_\w+|pgstat_count_\w+)$"),
    ("autovacuum / vacuum", r"^(vacuum|vacuum_rel|heap_vacuum_rel|lazy_\w+|do_autovacuum|AutoVacWorkerMain|AutoVacLauncherMain|table_recheck_autovac|index_vacuum_cleanup|btbulkdelete|btvacuumcleanup)$"),
    ("WAL writer / checkpointer / background", r"^(WalWriterMain|CheckpointerMain|BackgroundWriterMain|XLogBackgroundFlush|BgBufferSync|CheckPointGuts|PgArchiverMain|ServerLoop|PostmasterMain)$"),
    ("query dispatch (PostgresMain, exec_execute_message)", r"^(PostgresMain|exec_execute_message|exec_simple_query|exec_parse_message|exec_describe_\w+|PortalRun\w*|ProcessQuery|PortalRunMulti|PortalRunSelect|RunFromStore)$"),
]
# Kernel frames charged on their own when nothing named in postgres is nearer the leaf.
KERNEL_RULES = [
    ("kernel: network (loopback TCP)", r"^(tcp_|__tcp_|inet_|sock_|__sock_|ip_|__ip_|net_rx|__netif|netif_|process_backlog|__napi|napi_|skb_|__skb|__dev_queue|dev_hard|loopback_|sk_)"),
    ("kernel: disk (fdatasync, ext4, block)", r"^(ext4_|jbd2_|blk_|__blk|submit_bio|virtio|file_write_and_wait|filemap_|__filemap|do_fsync|__x64_sys_fdatasync|vfs_fsync)"),
    ("kernel: scheduler / futex / wake-ups", r"^(schedule|__schedule|try_to_wake_up|futex_|__futex|do_futex|finish_task_switch|ttwu_|pick_next|enqueue_|dequeue_|__wake_up\w*|ep_poll\w*|do_epoll_wait)"),
    ("kernel: page faults", r"^(exc_page_fault|do_user_addr_fault|handle_mm_fault|__handle_mm_fault|do_anonymous_page|clear_page\w*|asm_exc_page_fault)"),
]
# The functions whose inclusive share answers a question (postgres).
PG_INCLUSIVE = [
    "PostgresMain", "exec_bind_message", "exec_execute_message", "exec_parse_message",
    "GetCachedPlan", "BuildCachedPlan", "pg_plan_queries", "standard_planner",
    "RevalidateCachedQuery", "pg_analyze_and_rewrite_fixedparams", "raw_parser",
    "PortalRun", "standard_ExecutorStart", "standard_ExecutorRun", "standard_ExecutorFinish",
    "standard_ExecutorEnd", "ExecSetParamPlan", "ExecModifyTable", "ExecInsert",
    "ExecInsertIndexTuples", "btinsert", "_bt_doinsert", "heap_insert", "heap_update",
    "ExecOpenIndices", "BuildIndexInfo", "ExecCloseIndices", "index_open", "LockRelationOid",
    "LockReleaseAll", "ExecInitNode", "ExecPrepareQual",
    "ExecOnConflictUpdate", "_bt_check_unique",
    "XLogInsert", "XLogInsertRecord", "CommitTransactionCommand", "RecordTransactionCommit",
    "XLogFlush", "XLogWrite", "issue_xlog_fsync", "fdatasync", "__libc_fdatasync",
    "LockAcquireExtended", "LWLockAcquire", "SearchCatCache1", "set_config_by_name",
    "AtEOXact_GUC", "secure_read", "secure_write", "pq_getbyte", "internal_flush",
    "WaitEventSetWait", "palloc", "MemoryContextReset", "AllocSetAlloc", "pgss_ExecutorEnd",
    "pgss_store", "GetSnapshotData", "array_recv", "array_in", "array_unnest", "texteq",
    "varstr_cmp", "jsonb_in", "json_in", "do_autovacuum", "WalWriterMain", "CheckpointerMain",
]

KERNEL = re.compile(r"\[kernel|vmlinux")
rules = [(n, re.compile(p)) for n, p in PG_RULES]
krules = [(n, re.compile(p)) for n, p in KERNEL_RULES]

samples = 0
comp = collections.Counter()
kernel_share = collections.Counter()
incl = collections.Counter()
leaf = collections.Counter()
procs = collections.Counter()


# Helpers every component calls: charged to their caller's component when it has one.
GENERIC = {"memory (palloc, contexts)", "hash tables"}


def component_kernel(frames, otherwise):
    """The nearest kernel frame's component (scheduler, network, disk, ...), else `otherwise`."""
    for sym, dso in frames:
        if KERNEL.search(dso):
            for name, r in krules:
                if r.search(sym):
                    return name
    return otherwise


def component_pg(frames):
    for generic in (False, True):
        for sym, dso in frames:
            if KERNEL.search(dso):
                continue
            for name, r in rules:
                if (name in GENERIC) == generic and r.search(sym):
                    return name
    return component_kernel(frames, "other / unnamed (static functions)")


def component_webhookd(frames):
    """The nearest frame in webhookd's own code or a crate, by module path."""
    for sym, dso in frames:
        if KERNEL.search(dso):
            continue
        m = re.match(r"^(?:<)?(?:_<)?([a-z_][a-z0-9_]*)::([a-z_][a-z0-9_]*)", sym)
        if not m:
            continue
        crate, module = m.group(1), m.group(2)
        if crate in ("core", "alloc", "std"):
            continue
        return f"{crate}::{module}" if crate == "webhookd" else crate
    return component_kernel(frames, "other (libc, std, unnamed)")


def flush(head, frames):
    global samples
    if not head:
        return
    f = head.split()
    # comm may hold spaces (postgres' process titles): pid/tid is the first field of the
    # form N/N.
    pid = next((x.split("/")[0] for x in f if re.fullmatch(r"\d+/\d+", x)), None)
    if pid not in pids:
        return
    samples += 1
    procs[head.split(f"{pid}/")[0].strip()[:40]] += 1
    if who == "postgres":
        comp[component_pg(frames)] += 1
    else:
        comp[component_webhookd(frames)] += 1
    if frames and KERNEL.search(frames[0][1]):
        kernel_share["kernel"] += 1
    seen = set()
    for sym, _ in frames:
        if sym not in seen:
            seen.add(sym)
            incl[sym] += 1
    if frames:
        sym, dso = frames[0]
        leaf[sym if sym != "[unknown]" else f"[{os.path.basename(dso)}]"] += 1


head, frames = None, []
for line in sys.stdin:
    if not line.strip():
        flush(head, frames)
        head, frames = None, []
    elif line[0] in " \t":
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            rest = parts[1]
            m = re.match(r"(.*) \((.*)\)$", rest)
            sym, dso = (m.group(1), m.group(2)) if m else (rest, "")
            sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
            frames.append((sym, dso))
    else:
        flush(head, frames)
        head, frames = line, []
flush(head, frames)

if not samples:
    print(f"no samples of {who}'s processes")
    sys.exit(0)
ms = lambda n: n * PERIOD_MS / units if units else float("nan")
print(f"{who}: {samples:,} samples ({samples * PERIOD_MS / 1000:.1f} CPU-s), "
      f"{units:,.0f} units (one a {unit}): {ms(samples):.3f} CPU-ms per {unit}; "
      f"{100 * kernel_share['kernel'] / samples:.1f} % of samples in the kernel")
if who == "harness":
    sys.exit(0)
print("\nby process: " + ", ".join(f"{p} {100 * n / samples:.1f} %" for p, n in procs.most_common(6)))
print(f"\n| component (nearest frame that names one) | share | CPU-ms per {unit} |")
print("|---|---|---|")
for name, n in comp.most_common():
    print(f"| {name} | {100 * n / samples:.1f} % | {ms(n):.3f} |")
if who == "postgres":
    print(f"\n| function (inclusive: on the sample's chain) | share | CPU-ms per {unit} |")
    print("|---|---|---|")
    for name in PG_INCLUSIVE:
        if incl[name]:
            print(f"| `{name}` | {100 * incl[name] / samples:.1f} % | {ms(incl[name]):.3f} |")
else:
    own = [(s, n) for s, n in incl.most_common() if "webhookd::" in s and "{{closure}}" not in s]
    if not own:
        print("\n(no webhookd function named: a stripped build; threads and the kernel only)")
    else:
        print(f"\n| function (inclusive), top 25 of webhookd's own | share |")
        print("|---|---|")
    for name, n in own[:25]:
        print(f"| `{name[:110]}` | {100 * n / samples:.1f} % |")
print("\n| leaf symbol (self), top 30 | share |")
print("|---|---|")
for name, n in leaf.most_common(30):
    print(f"| `{name[:100]}` | {100 * n / samples:.1f} % |")
