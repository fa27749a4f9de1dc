/*
 * `katana status`, `katana top` and `katana kill`: a quick look at a running katana, and
 * killing flows, over its own REST API (docs/api.md) with libcurl. The API's address and token
 * are read from the config file with the agent's loader (api.listen, api.token; an absent
 * `api` is API_DEFAULT_LISTEN without a token, as `katana run` serves it); nothing is started.
 *
 * Layout: cli_remote.c holds the API client shared by the three commands (the config, one
 * request, the error texts), `status` and `kill`; cli_top.c holds `top` (the /v1/traffic
 * stream, the terminal). Exit codes as katana's: 0 success, 1 the API could not be asked or
 * refused, 2 a usage error.
 */
#ifndef AG_CLI_REMOTE_H
#define AG_CLI_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <curl/curl.h>
#include <jansson.h>

/** The config these commands read without -c: the packages' (packaging/systemd/katana.service). */
#define AG_CLI_DEFAULT_CONFIG "/etc/katana/config.json"

/** Where the API is and how to authenticate to it, from one config file. */
typedef struct ag_cli_api {
    const char *config_path; /**< the file read (borrowed), named in the error texts */
    char base[96];           /**< "http://127.0.0.1:9090": api.listen, a wildcard address
                                  (0.0.0.0, ::) replaced by loopback */
    char *auth;              /**< "Authorization: Bearer TOKEN", or NULL without a token */
    bool curl_ready;         /**< libcurl's global state is set up (ag_cli_api_free ends it) */
} ag_cli_api;

/**
 * Read the api section of @p config_path with ag_config_load_file() (the whole file is parsed
 * and checked, as `katana check` does offline; no panel is asked, nothing is bound).
 * Also sets up libcurl's global state, which ag_cli_api_free() ends.
 * @param out  overwritten; release with ag_cli_api_free()
 * @return 0, or 1 after printing "katana: cannot read the configuration: REASON" on stderr.
 */
int ag_cli_api_open(const char *config_path, ag_cli_api *out);

/** Free what ag_cli_api_open() allocated (the token header). NULL-safe, idempotent. */
void ag_cli_api_free(ag_cli_api *api);

/**
 * Set up @p easy (a handle from curl_easy_init, or reset) for METHOD @p method on
 * base + @p path (path starts with '/', query included, already escaped), with the token
 * header and the connect timeout; @p headers receives the header list the caller frees with
 * curl_slist_free_all() after the transfer. @p timeout_s bounds the whole transfer (0: none,
 * for a stream).
 * @return 0, or -ENOMEM.
 */
int ag_cli_api_setup(const ag_cli_api *api, CURL *easy, const char *method, const char *path,
                     long timeout_s, struct curl_slist **headers);

/**
 * Print on stderr why a transfer did not get an answer: "katana: cannot reach the REST API at
 * BASE: connection refused" (the socket error, in lower case, or libcurl's text).
 * @param easy  the handle of the failed transfer (for its socket errno)
 * @param code  the CURLcode it ended with
 * @return 1 (the exit status).
 */
int ag_cli_api_unreachable(const ag_cli_api *api, CURL *easy, CURLcode code);

/**
 * Print on stderr why an answer of HTTP status @p status is not a success: 401 is "katana: the
 * REST API refused the token (401): check api.token in FILE"; any other status "katana: PATH:
 * the REST API answered STATUS: ERROR", ERROR being the answer's "error" member when it has one.
 * @param body  the answer's parsed JSON, or NULL
 * @return 1 (the exit status).
 */
int ag_cli_api_refused(const ag_cli_api *api, const char *path, long status, const json_t *body);

/**
 * One request, waited for (10 s at most): @p method on @p path, the answer parsed as JSON.
 * Every failure is printed (ag_cli_api_unreachable, ag_cli_api_refused, or an answer that is
 * not JSON) and returns 1; a status in @p ok_status (0-terminated list of accepted statuses,
 * NULL: any 2xx) returns 0.
 * @param status  receives the HTTP status (may be NULL)
 * @param body    receives the parsed answer (own reference, NULL for an empty body); may be
 *                NULL when the caller does not want it
 * @return 0 or 1.
 */
int ag_cli_api_call(const ag_cli_api *api, const char *method, const char *path,
                    const long *ok_status, long *status, json_t **body);

/**
 * Format @p bytes for a table: "812 B", "14.3 KB", "2.1 MB", "1.0 GB", "3.2 TB" (powers of
 * 1000, one decimal above bytes) into @p buf (at least 16 bytes).
 * @return buf.
 */
const char *ag_cli_bytes(uint64_t bytes, char *buf, size_t size);

/** A JSON integer member as uint64_t (0 when absent, negative or not an integer). */
uint64_t ag_cli_u64(const json_t *o, const char *key);

/** A JSON string member, or @p dflt when absent or not a string. */
const char *ag_cli_str(const json_t *o, const char *key, const char *dflt);

/** A text table: rows of cells printed in columns as wide as their widest cell. */
typedef struct ag_cli_table {
    size_t ncols;  /**< cells per row, set before the first row */
    size_t nrows;  /**< rows so far, the header included */
    size_t cap;    /**< rows allocated */
    char **cells;  /**< nrows * ncols owned copies */
    bool oom;      /**< a row could not be stored: the table prints what it holds */
} ag_cli_table;

/**
 * Append one row of t->ncols cells (copied; NULL prints as "-"). On allocation failure the
 * row is dropped and t->oom set.
 */
void ag_cli_table_row(ag_cli_table *t, const char *const *cells);

/**
 * Print @p t to @p f, cells separated by two spaces; column i is right-aligned when
 * @p align[i] is 'r' (numbers), else left-aligned. Trailing blanks are not printed.
 */
void ag_cli_table_print(const ag_cli_table *t, FILE *f, const char *align);

/** Free the cells of @p t and zero it (ncols kept). */
void ag_cli_table_free(ag_cli_table *t);

/**
 * The shared start of every command's arguments: -c FILE / --config FILE and -h / --help are
 * handled by each command's own getopt loop; this names the config in force.
 * @return @p given, or AG_CLI_DEFAULT_CONFIG when it is NULL.
 */
const char *ag_cli_config_path(const char *given);

/**
 * `katana status [-c FILE]`: the nodes (tag, panel, state, users, sessions, flows, last pull and
 * push with their results, outbox) and the users with live sessions or traffic (sessions,
 * flows, bytes up and down since start), from GET /healthz, /v1/nodes, /v1/connections and
 * /v1/usage, as two tables on stdout.
 * @param argc, argv  the arguments after the command word ("status" is argv[0])
 * @return 0, 1 (the API could not be asked, or refused), 2 (usage error; --help prints the
 *         usage on stdout and returns 0).
 */
int ag_cli_status_main(int argc, char **argv);

/**
 * `katana kill [-c FILE] FLOW_ID... | --user UID | --session ID | --node TAG | --inbound TAG |
 * --outbound TAG | --all`: end flows through the API. Flow ids are each DELETE
 * /v1/connections/{id} (204; 404 "no live flow ID" is reported and makes the exit status 1);
 * selectors are ANDed into one DELETE /v1/connections?... (seed 003: kill_where over the given
 * fields); --all, and only --all, sends it without a selector (every flow). Prints
 * "killed N flows".
 * @return 0, 1 (API failure, or a flow id that was not live), 2 (usage error).
 */
int ag_cli_kill_main(int argc, char **argv);

/**
 * `katana top [-c FILE] [-n N] [--once]`: the busiest users (rate up and down over the last
 * tick, bytes since start, flows; from the GET /v1/traffic stream, one event per sampler tick)
 * and flows (rates from two GET /v1/connections samples) as a screen redrawn at every tick,
 * N rows each (default 10). On a terminal, stdin is put in non-canonical no-echo mode (termios)
 * so that `q` quits at once; the terminal is restored on every exit, SIGINT and SIGTERM
 * included. --once prints one screen, after one traffic event and two flow samples, without
 * clearing, and exits.
 * @return 0 (q, --once), 1 (API failure, the stream ended), 2 (usage error), 128 + signal
 *         after SIGINT / SIGTERM.
 */
int ag_cli_top_main(int argc, char **argv);

#endif
