#ifndef SQSYNC_CSQLITE_SHIM_H
#define SQSYNC_CSQLITE_SHIM_H
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro Swift cannot import: SQLite copies the bound bytes.
static inline int sqsync_bind_text(sqlite3_stmt *stmt, int index, const char *text, int length) {
    return sqlite3_bind_text(stmt, index, text, length, SQLITE_TRANSIENT);
}

static inline int sqsync_bind_blob(sqlite3_stmt *stmt, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(stmt, index, bytes, length, SQLITE_TRANSIENT);
}

static inline void sqsync_result_blob(sqlite3_context *context, const void *bytes, int length) {
    sqlite3_result_blob(context, bytes, length, SQLITE_TRANSIENT);
}

static inline void sqsync_result_text(sqlite3_context *context, const char *text, int length) {
    sqlite3_result_text(context, text, length, SQLITE_TRANSIENT);
}

/// Turns triggers off (0) or on (1) for one connection; foreign key actions still run.
/// sqlite3_db_config is variadic; Swift cannot call it directly.
static inline int sqsync_enable_triggers(sqlite3 *db, int on) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, on, (int *)0);
}

/// Stops SQLite counting its memory (SQLITE_CONFIG_MEMSTATUS); sqlite3_config is variadic.
static inline int sqsync_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/// Keeps each statement journal in memory, in one block, until it outgrows `bytes`
/// (SQLITE_CONFIG_STMTJRNL_SPILL); sqlite3_config is variadic.
static inline int sqsync_set_statement_journal_spill(int bytes) {
    return sqlite3_config(SQLITE_CONFIG_STMTJRNL_SPILL, bytes);
}

#endif
