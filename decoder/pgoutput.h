/* A parser for the pgoutput logical replication protocol, versions 1 to 4. It allocates nothing and checks
 * every length before reading. */
#ifndef CDC_PGOUTPUT_H
#define CDC_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decoder/base/util.h"

/* pgo_parse() turns one message (the payload of one XLogData 'w' frame) into a pgo_msg. Its strings
 * and column data point into the caller's bytes. The relation cache maps relation ids to their latest
 * Relation message. This layer knows nothing of transactions held or sinks (txn.h does). */

/* PostgreSQL's MaxTupleAttributeNumber. No tuple can have more columns. */
#define PGO_MAX_COLUMNS 1664

/* pgoutput timestamps count from 2000-01-01. The parser converts them to the Unix epoch. */
#define PGO_EPOCH_OFFSET_US INT64_C(946684800000000)

typedef uint64_t pgo_lsn;

typedef enum pgo_type {
	PGO_BEGIN = 'B',
	PGO_COMMIT = 'C',
	PGO_ORIGIN = 'O',
	PGO_RELATION = 'R',
	PGO_TYPE = 'Y',
	PGO_INSERT = 'I',
	PGO_UPDATE = 'U',
	PGO_DELETE = 'D',
	PGO_TRUNCATE = 'T',
	PGO_MESSAGE = 'M',
	PGO_STREAM_START = 'S',
	PGO_STREAM_STOP = 'E',
	PGO_STREAM_COMMIT = 'c',
	PGO_STREAM_ABORT = 'A',
	PGO_BEGIN_PREPARE = 'b',
	PGO_PREPARE = 'P',
	PGO_COMMIT_PREPARED = 'K',
	PGO_ROLLBACK_PREPARED = 'r',
	PGO_STREAM_PREPARE = 'p',
} pgo_type;

/* Name of a message type for error messages ("Insert", "Stream Commit", ..., or "unknown"). */
const char *pgo_type_name(int type);

/* One column of a tuple, as sent. */
typedef enum pgo_datum_kind {
	PGO_NULL = 'n',
	PGO_TOAST = 'u', /* unchanged TOASTed value, not sent */
	PGO_TEXT = 't',
	PGO_BINARY = 'b',
} pgo_datum_kind;

typedef struct pgo_datum {
	pgo_datum_kind kind;
	uint32_t len;	  /* PGO_TEXT, PGO_BINARY */
	const char *data; /* points into the message, not NUL-terminated */
} pgo_datum;

typedef struct pgo_tuple {
	uint16_t ncols;
	pgo_datum cols[PGO_MAX_COLUMNS];
} pgo_tuple;

typedef struct pgo_relcol {
	uint8_t flags;	  /* 1 if part of the replica identity key */
	const char *name; /* NUL-terminated, points into the message */
	uint32_t type_oid;
	int32_t typmod;
} pgo_relcol;

/* Transaction metadata shared by several message types. Times are microseconds since the Unix epoch. */
typedef struct pgo_msg {
	pgo_type type;
	/* The (sub)transaction id carried by messages inside a stream block, and by the stream, prepare and
	 * 2PC messages themselves. 0 when the message carries none. */
	uint32_t xid;
	union {
		struct {
			pgo_lsn final_lsn; /* the commit record's position */
			int64_t commit_time;
		} begin;
		struct {
			uint8_t flags;
			pgo_lsn commit_lsn, end_lsn;
			int64_t commit_time;
		} commit; /* PGO_COMMIT and PGO_STREAM_COMMIT */
		struct {
			pgo_lsn lsn;
			const char *name;
		} origin;
		struct {
			uint32_t relid;
			const char *nspname, *relname;
			char replident; /* 'd' default, 'n' nothing, 'f' full, 'i' index */
			uint16_t ncols;
			pgo_relcol cols[PGO_MAX_COLUMNS];
		} relation;
		struct {
			uint32_t oid;
			const char *nspname, *typname;
		} typ;
		struct {
			uint32_t relid;
			char old_kind; /* 0 none, 'K' key columns only, 'O' whole old row */
			pgo_tuple old, new;
		} change; /* PGO_INSERT (new only), PGO_UPDATE, PGO_DELETE (old only) */
		struct {
			uint8_t flags; /* 1 CASCADE, 2 RESTART IDENTITY */
			uint32_t nrels;
			const uint8_t *relids; /* nrels big-endian uint32s, read with pgo_truncate_relid() */
		} truncate;
		struct {
			uint8_t flags; /* 1 if transactional */
			pgo_lsn lsn;
			const char *prefix;
			uint32_t len;
			const char *content;
		} message;
		struct {
			bool first_segment;
		} stream_start;
		struct {
			uint32_t subxid;     /* == xid when the whole transaction aborted */
			bool has_abort_info; /* protocol 4 with parallel streaming */
			pgo_lsn abort_lsn;
			int64_t abort_time;
		} stream_abort;
		struct {
			uint8_t flags;
			pgo_lsn prepare_lsn, end_lsn;
			int64_t prepare_time;
			const char *gid;
		} prepare; /* PGO_BEGIN_PREPARE (flags 0), PGO_PREPARE, PGO_STREAM_PREPARE */
		struct {
			uint8_t flags;
			pgo_lsn commit_lsn, end_lsn;
			int64_t commit_time;
			const char *gid;
		} commit_prepared;
		struct {
			uint8_t flags;
			pgo_lsn prepare_end_lsn, rollback_end_lsn;
			int64_t prepare_time, rollback_time;
			const char *gid;
		} rollback_prepared;
	};
} pgo_msg;

typedef struct pgo_options {
	int proto_version; /* 1..4 */
	/* Protocol 4 with streaming = parallel. Stream Abort then carries abort LSN and time. */
	bool stream_abort_info;
} pgo_options;

/* Parses one message. in_stream says the message arrived between Stream Start and Stream Stop. Then
 * Relation, Type, Insert, Update, Delete, Truncate and Message carry a leading xid. On error it returns
 * false and writes "<Type> message at offset N: what is wrong" to err. The message must outlive every
 * pointer in *out. */
bool pgo_parse(const uint8_t *data, size_t len, const pgo_options *opt, bool in_stream, pgo_msg *out,
	       char *err, size_t errlen) CDC_MUST_CHECK;

uint32_t pgo_truncate_relid(const pgo_msg *msg, uint32_t index);

/* The relation cache. Entries own copies of their strings. */
typedef struct pgo_rel {
	uint32_t relid;
	char *nspname, *relname;
	char replident;
	uint16_t ncols;
	pgo_relcol *cols; /* names owned by the entry */
	uint16_t nkeys;	  /* columns with flags & 1 */
	/* Bumped each time the entry is replaced, so callers can cache per-relation work. */
	uint64_t version;
} pgo_rel;

typedef struct pgo_relcache pgo_relcache;

pgo_relcache *pgo_relcache_new(void);
void pgo_relcache_free(pgo_relcache *relcache);
/* Adds or replaces the entry for a PGO_RELATION message. */
void pgo_relcache_put(pgo_relcache *relcache, const pgo_msg *relation);
const pgo_rel *pgo_relcache_get(const pgo_relcache *relcache, uint32_t relid);
/* The entry of table nspname.relname, looked for among all (not for every row), or NULL. */
const pgo_rel *pgo_relcache_find(const pgo_relcache *relcache, const char *nspname, const char *relname);
/* The primary key of relation relid. Under REPLICA IDENTITY FULL the server marks every column as identity.
 * The cache then marks only these (for event keys, Kafka keys and projections). */
void pgo_relcache_set_primary_key(pgo_relcache *relcache, uint32_t relid, const char *const *names,
				  size_t count);
/* Records a PGO_TYPE message, the name of a non-built-in type. */
void pgo_relcache_put_type(pgo_relcache *relcache, const pgo_msg *type);
/* "schema.name" for types announced by Type messages, the built-in name (int4, text, _int4, ...)
 * for built-in types, NULL if unknown. */
const char *pgo_type_name_of(const pgo_relcache *relcache, uint32_t oid);
/* Appends a column's type as PostgreSQL's format_type(oid, typmod) prints it (see pgo_types_format). For a
 * type a Type message announced, see pgo_types_format_named. It appends "???" for a type neither built in nor
 * announced. */
void pgo_format_type(const pgo_relcache *relcache, uint32_t oid, int32_t typmod, buf *out);

#endif
