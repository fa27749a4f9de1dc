/*
 * katana's two configuration commands (DESIGN.md "agent/"; the command line is agent/cli.c):
 *   katana run -c FILE     serve every node of FILE; SIGHUP reloads, SIGTERM/SIGINT stop,
 *                          SIGUSR1 logs each user's usage since start
 *   katana check -c FILE   parse, fetch, lower and dry-run (seed 001 "check")
 * Exit codes: 0 success, 1 configuration/runtime failure (2, a usage error, is cli.c's).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "agent/agent_config.h"
#include "agent/check_report.h"
#include "agent/cli.h"
#include "agent/lower.h"
#include "agent/node.h"
#include "agent/uplink.h"
#include "api/api.h"
#include "panel/xboard.h"
#include "supervisor/supervisor.h"
#include "supervisor/util/log.h"

#define MOD "ag.main"
#define RELOAD_SPACING_MS 200u /* shortest time between the starts of two reloads */

typedef struct ag_main {
    uv_loop_t loop;
    sv_supervisor *sv;
    ag_manager *mgr;
    const char *config_path;
    ag_config started;  /* as started: what a reload cannot change (ag_config_restart_keys) */
    int pending_level;  /* log level of the config being reloaded */
    unsigned grace_s;   /* shutdown_grace in force (seed 001 default 5 s) */
    unsigned pending_grace; /* shutdown_grace of the config being reloaded */
    uv_signal_t sigs[4];
    size_t n_sigs;
    bool reload_pending;
    uv_timer_t reload_timer; /* a reload held back by RELOAD_SPACING_MS (request_reload) */
    uint64_t reload_started; /* uv_now() when the last reload started */
    bool stopping;
    bool said_running; /* "katana VERSION running" was logged: every node applied once */
    int exit_code;
    api_server *api;    /* the REST API; its settings need a restart to change */
    ag_uplink *uplink;  /* remote panel pulls, usage outbox and pushes */
} ag_main;

/* ------------------------------------------------------------------------------------------ */
/* usage lines                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static int usage_cmp(const void *a, const void *b)
{
    const sv_usage *x = a, *y = b;
    return x->user < y->user ? -1 : x->user > y->user;
}

/* "usage user 1: up X down Y" for every user with traffic since start. */
static void log_usage(ag_main *am)
{
    sv_usage *u = NULL;
    long n = sv_usage_snapshot(am->sv, &u);
    if (n < 0) {
        SV_LOG(SV_LOG_WARN, MOD, "usage snapshot failed: %s", strerror((int)-n));
        return;
    }
    if (n > 1)
        qsort(u, (size_t)n, sizeof *u, usage_cmp);
    for (long i = 0; i < n; i++)
        SV_LOG(SV_LOG_INFO, MOD, "usage user %" PRIu64 ": up %" PRIu64 " down %" PRIu64,
               u[i].user, u[i].up, u[i].down);
    free(u);
}

/* ------------------------------------------------------------------------------------------ */
/* run: stop, reload, signals                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void stop(ag_main *am, uint32_t grace_ms)
{
    if (am->stopping)
        return;
    am->stopping = true;
    if (am->sv != NULL) {
        if (am->exit_code == 0)
            ag_uplink_save_hints(am->uplink); /* known clients for the next start */
        sv_shutdown(am->sv, grace_ms);
        ag_uplink_flush(am->uplink); /* what the last sessions moved goes to the outbox */
        if (am->exit_code == 0)
            log_usage(am); /* the final usage per user */
    }
    for (size_t i = 0; i < am->n_sigs; i++)
        uv_close((uv_handle_t *)&am->sigs[i], NULL);
    uv_close((uv_handle_t *)&am->reload_timer, NULL);
    uv_stop(&am->loop); /* the supervisor may keep control-loop handles until it is freed */
}

static bool request_reload(ag_main *am);

static void on_reloaded(void *arg, int status, const sv_error *err)
{
    ag_main *am = arg;
    if (status != 0 && ag_manager_partly_applied(am->mgr)) {
        SV_LOG(SV_LOG_INFO, MOD, "config reloaded but for refused nodes: %s", err->msg);
        ag_uplink_applied(am->uplink, ag_manager_running(am->mgr)); /* the nodes that applied */
    } else if (status != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "reload refused, keeping the running config: %s", err->msg);
    } else {
        ag_uplink_applied(am->uplink, ag_manager_running(am->mgr)); /* now the last good */
        ag_uplink_restore_hints(am->uplink); /* when the first load did not apply */
        sv_log_threshold = am->pending_level;
        am->grace_s = am->pending_grace;
        if (am->said_running) {
            SV_LOG(SV_LOG_INFO, MOD, "config reloaded");
        } else { /* the first apply after waiting for a panel: the start is done now */
            SV_LOG(SV_LOG_INFO, MOD, "katana %s running", PACKAGE_VERSION);
            am->said_running = true;
        }
    }
    if (am->reload_pending && !am->stopping) {
        am->reload_pending = false;
        request_reload(am);
    }
}

static void warn_restart_key(void *arg, const char *path)
{
    (void)arg;
    SV_LOG(SV_LOG_WARN, MOD, "%s changed: restart to apply it", path);
}

static void start_reload(ag_main *am)
{
    ag_config cfg;
    sv_error err = {0};
    am->reload_started = uv_now(&am->loop);
    int rc = ag_config_load_file(am->config_path, &cfg, &err);
    if (rc == 0) /* before a machine entry is expanded into its nodes */
        ag_config_restart_keys(&am->started, &cfg, warn_restart_key, NULL);
    if (rc == 0 && (rc = ag_uplink_expand(am->uplink, &cfg, &err)) != 0)
        ag_config_free(&cfg); /* a machine's nodes are the uplink's */
    if (rc != 0) {
        SV_LOG(SV_LOG_WARN, MOD, "reload refused, keeping the running config: %s", err.msg);
        return;
    }
    am->pending_level = cfg.log_level;
    am->pending_grace = cfg.shutdown_grace;
    rc = ag_manager_load(am->mgr, &cfg, on_reloaded, am, &err);
    ag_config_free(&cfg);
    if (rc != 0)
        SV_LOG(SV_LOG_WARN, MOD, "reload refused, keeping the running config: %s", err.msg);
}

static void on_reload_timer(uv_timer_t *t)
{
    request_reload(t->data);
}

/* Every reload request (SIGHUP, POST /v1/nodes/{tag}/sync, new panel data) comes here, so a
 * storm of them makes a few reloads: while a load runs, or within RELOAD_SPACING_MS of the
 * start of the last reload, the requests fold into one reload run when that ends.
 * @return true when this request started or scheduled a reload, false when it was folded
 *         into one already due. */
static bool request_reload(ag_main *am)
{
    if (am->stopping)
        return false;
    if (ag_manager_busy(am->mgr)) {
        bool folded = am->reload_pending;
        am->reload_pending = true; /* run one more after the load in flight */
        return !folded;
    }
    if (uv_is_active((uv_handle_t *)&am->reload_timer))
        return false;
    uint64_t now = uv_now(&am->loop), due = am->reload_started + RELOAD_SPACING_MS;
    if (am->reload_started != 0 && now < due)
        uv_timer_start(&am->reload_timer, on_reload_timer, due - now, 0);
    else
        start_reload(am);
    return true;
}

static void on_signal(uv_signal_t *h, int signum)
{
    ag_main *am = h->data;
    if (am->stopping)
        return;
    switch (signum) {
    case SIGHUP:
        SV_LOG(SV_LOG_INFO, MOD, "SIGHUP: reloading %s", am->config_path);
        request_reload(am);
        break;
    case SIGUSR1:
        log_usage(am);
        break;
    default:
        SV_LOG(SV_LOG_INFO, MOD, "signal %d: shutting down", signum);
        stop(am, am->grace_s * 1000u);
        break;
    }
}

static int start_signals(ag_main *am)
{
    static const int nums[] = {SIGHUP, SIGTERM, SIGINT, SIGUSR1};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        uv_signal_t *s = &am->sigs[am->n_sigs];
        int rc = uv_signal_init(&am->loop, s);
        if (rc != 0)
            return rc;
        am->n_sigs++;
        s->data = am;
        rc = uv_signal_start(s, on_signal, nums[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void on_first_load(void *arg, int status, const sv_error *err)
{
    ag_main *am = arg;
    if (status != 0 && ag_manager_partly_applied(am->mgr)) {
        SV_LOG(SV_LOG_INFO, MOD, "first load applied but for refused nodes: %s", err->msg);
        status = 0; /* the other nodes run */
    }
    if (status != 0 && ag_uplink_drop_stored(am->uplink, err) == 0) {
        fprintf(stderr, "katana: %s\n", err->msg);
        am->exit_code = 1;
        stop(am, 0);
        return;
    }
    if (status == 0) {
        ag_uplink_applied(am->uplink, ag_manager_running(am->mgr));
        ag_uplink_restore_hints(am->uplink); /* the clients known at the last stop */
        SV_LOG(SV_LOG_INFO, MOD, "katana %s running", PACKAGE_VERSION);
        am->said_running = true;
    } /* else a stored panel state was refused: the nodes wait for the panel */
    if (am->reload_pending) {
        am->reload_pending = false;
        request_reload(am);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* REST API hooks                                                                               */
/* ------------------------------------------------------------------------------------------ */

static long api_nodes(void *arg, api_node_status **out)
{
    ag_main *am = arg;
    long n = ag_manager_status(am->mgr, out);
    if (n > 0)
        ag_uplink_status_merge(am->uplink, *out, n); /* push and outbox: its published snapshot */
    return n;
}

static long api_usage(void *arg, api_usage_row **out)
{
    ag_main *am = arg;
    return ag_uplink_usage(am->uplink, out);
}

static long api_requests(void *arg, api_panel_requests **out)
{
    ag_main *am = arg;
    return ag_uplink_requests(am->uplink, out);
}

static long api_audit(void *arg, api_audit_row **out)
{
    ag_main *am = arg;
    return ag_uplink_audit(am->uplink, out);
}

static int api_sync(void *arg, const char *tag)
{
    ag_main *am = arg;
    return ag_manager_request_sync(am->mgr, tag);
}

/* Control loop: POST /v1/nodes/{tag}/sync. A pull re-reads the config and every node's panel
 * (the local panel's files), as SIGHUP does, and applies what changed. */
static void on_sync_request(void *arg, const char *tag)
{
    ag_main *am = arg;
    if (am->stopping)
        return;
    if (request_reload(am))
        SV_LOG(SV_LOG_INFO, MOD, "node %s: sync requested through the API", tag);
    else /* folded into a reload already due */
        SV_LOG(SV_LOG_DEBUG, MOD, "node %s: sync requested through the API (again)", tag);
}

static int start_api(ag_main *am, const ag_config *cfg)
{
    sv_error err = {0};
    api_options o = {.listen = cfg->api_listen, .token = cfg->api_token, .sv = am->sv,
                     .nodes = api_nodes, .sync = api_sync, .usage = api_usage,
                     .requests = api_requests, .audit = api_audit, .arg = am};
    int rc = ag_manager_enable_sync(am->mgr, on_sync_request, am);
    if (rc != 0) {
        fprintf(stderr, "katana: api: %s\n", uv_strerror(rc));
        return rc;
    }
    rc = api_server_start(&o, &am->api, &err);
    if (rc != 0) {
        fprintf(stderr, "katana: %s\n", err.msg);
        return rc;
    }
    SV_LOG(SV_LOG_INFO, MOD, "api listening on %s",
           cfg->api_listen != NULL ? cfg->api_listen : API_DEFAULT_LISTEN);
    return 0;
}

/* The uplink has new panel data: reload, as SIGHUP does, after the load in flight. */
static void on_panel_change(void *arg)
{
    ag_main *am = arg;
    request_reload(am);
}

/* The node manager's remote panel clients: the uplink's (no process-wide hook). */
static int remote_client(void *arg, const ag_node_config *nc, pn_client **out, sv_error *err)
{
    ag_main *am = arg;
    if (am->uplink == NULL)
        return sv_error_set(err, -ENOTSUP, "node %s: panel uplink not running", nc->tag);
    return ag_uplink_client(am->uplink, nc, out, err);
}

/* Start everything on the loop; returns non-zero when nothing could start. */
static int run_start(ag_main *am, const ag_config *cfg)
{
    sv_error err = {0};
    sv_options opts = {.workers = cfg->workers, .max_connections = cfg->max_connections,
                       .dns = cfg->dns, .node_speed_limit = ag_lower_speed(cfg->node_speed_limit),
                       .redis = cfg->redis};
    int rc = sv_supervisor_new(&am->loop, &opts, &am->sv);
    if (rc != 0) {
        fprintf(stderr, "katana: cannot start the supervisor: %s\n", uv_strerror(rc));
        return rc;
    }
    ag_remote_source remote = {.client = remote_client, .arg = am};
    rc = ag_manager_new(&am->loop, am->sv, &remote, &am->mgr);
    if (rc == 0)
        rc = start_signals(am);
    if (rc != 0) {
        fprintf(stderr, "katana: %s\n", uv_strerror(rc));
        return rc;
    }
    /* the uplink first: its database lock refuses a second instance before any port is taken */
    rc = ag_uplink_new(&am->loop, am->sv, cfg, on_panel_change, am, &am->uplink, &err);
    if (rc != 0) {
        fprintf(stderr, "katana: %s\n", err.msg);
        return rc;
    }
    rc = start_api(am, cfg);
    if (rc != 0)
        return rc;
    if (!ag_uplink_ready(am->uplink)) { /* never exit on a panel answer: wait for one */
        ag_manager_declare(am->mgr, cfg); /* listed, not applied, with the pulls' errors */
        SV_LOG(SV_LOG_INFO, MOD, "katana %s waiting for the panel's first answer",
               PACKAGE_VERSION);
        return 0;
    }
    ag_config run;
    rc = ag_config_load_file(am->config_path, &run, &err); /* the file as parsed at start */
    if (rc == 0 && (rc = ag_uplink_expand(am->uplink, &run, &err)) == 0)
        rc = ag_manager_load(am->mgr, &run, on_first_load, am, &err);
    ag_config_free(&run);
    if (rc != 0)
        fprintf(stderr, "katana: %s\n", err.msg);
    return rc;
}

int ag_cmd_run(const char *path)
{
    ag_main am = {.config_path = path};
    ag_config cfg;
    sv_error err = {0};
    if (ag_config_load_file(path, &cfg, &err) != 0) {
        fprintf(stderr, "katana: configuration invalid: %s\n", err.msg);
        return 1;
    }
    sv_log_threshold = cfg.log_level;
    am.grace_s = cfg.shutdown_grace;
    signal(SIGPIPE, SIG_IGN);
    int rc = uv_loop_init(&am.loop);
    if (rc != 0) {
        ag_config_free(&cfg);
        fprintf(stderr, "katana: %s\n", uv_strerror(rc));
        return 1;
    }
    uv_timer_init(&am.loop, &am.reload_timer);
    am.reload_timer.data = &am;
    am.started = cfg; /* freed at exit */
    if (run_start(&am, &am.started) != 0) {
        am.exit_code = 1;
        stop(&am, 0);
    }
    uv_run(&am.loop, UV_RUN_DEFAULT); /* returns at once when stop() already ran */
    for (size_t i = 0; i < am.n_sigs; i++)
        if (!uv_is_closing((uv_handle_t *)&am.sigs[i]))
            uv_close((uv_handle_t *)&am.sigs[i], NULL);
    if (!uv_is_closing((uv_handle_t *)&am.reload_timer))
        uv_close((uv_handle_t *)&am.reload_timer, NULL);
    api_server_stop(am.api); /* before what its threads read */
    ag_manager_free(am.mgr);
    ag_uplink_free(am.uplink);
    if (am.sv != NULL)
        sv_supervisor_free(am.sv);
    uv_run(&am.loop, UV_RUN_DEFAULT); /* finish the closes */
    if (uv_loop_close(&am.loop) != 0)
        SV_LOG(SV_LOG_DEBUG, MOD, "control loop closed with handles left");
    ag_config_free(&am.started);
    return am.exit_code;
}

/* ------------------------------------------------------------------------------------------ */
/* check                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct check_ctx {
    bool done;
    int status;
    sv_error err;
    const char *path; /* the file checked (ag_check_warn_held) */
} check_ctx;

/* Whether @p sa's address can be bound on this host, as `run` will bind it: a scratch socket
 * bound to it with port 0, not the port itself, which a running katana holds. 0 or -errno. */
static int addr_assignable(const struct sockaddr_storage *sa)
{
    struct sockaddr_storage a = *sa;
    socklen_t len = a.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                            : sizeof(struct sockaddr_in);
    if (a.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&a)->sin6_port = 0;
    else
        ((struct sockaddr_in *)&a)->sin_port = 0;
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 || bind(fd, (struct sockaddr *)&a, len) != 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* @p what ("api.listen") names @p addr in the error when it cannot be bound here. */
static int check_assignable(const struct sockaddr_storage *sa, const char *what,
                            const char *addr, sv_error *err)
{
    int rc = addr_assignable(sa);
    if (rc == -EADDRNOTAVAIL)
        return sv_error_set(err, -EINVAL, "%s: %s is not an address of this host", what, addr);
    if (rc != 0)
        return sv_error_set(err, -EINVAL, "%s: %s: %s", what, addr, strerror(-rc));
    return 0;
}

/* An IP literal @p ip a node listens on; @p what names where it comes from. */
static int check_listen_ip(const char *ip, const char *what, sv_error *err)
{
    struct sockaddr_storage sa = {0};
    if (inet_pton(AF_INET, ip, &((struct sockaddr_in *)&sa)->sin_addr) == 1)
        sa.ss_family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)&sa)->sin6_addr) == 1)
        sa.ss_family = AF_INET6;
    else
        return 0; /* not a literal: sv_check has said what is wrong with it */
    return check_assignable(&sa, what, ip, err);
}

/* What `run` opens before any node: the API's address (a warning when another process holds
 * its port) and the store's directory (a missing one fails run with "x.db.lock: No such file or
 * directory"). 0 or -EINVAL (err set). */
static int check_local(const ag_config *cfg, const char *path, sv_error *err)
{
    const char *listen = cfg->api_listen != NULL ? cfg->api_listen : API_DEFAULT_LISTEN;
    struct sockaddr_storage sa;
    bool loopback;
    int rc = api_listen_parse(listen, &sa, &loopback, err);
    if (rc == 0)
        rc = check_assignable(&sa, "api.listen", listen, err);
    if (rc == 0) /* run would fail to start, but the file is valid: a warning */
        ag_check_warn_held("api.listen", &sa, SOCK_STREAM, path);
    for (size_t i = 0; rc == 0 && i < cfg->n_nodes; i++) {
        char what[48];
        snprintf(what, sizeof what, "nodes[%zu].listen", i);
        if (cfg->nodes[i].listen != NULL)
            rc = check_listen_ip(cfg->nodes[i].listen, what, err);
    }
    if (rc != 0 || cfg->db_path == NULL) /* run opens the store whenever db.path is set */
        return rc;
    const char *slash = strrchr(cfg->db_path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash == NULL ? 1 : slash == cfg->db_path ? 1
             : (int)(slash - cfg->db_path), slash == NULL ? "." : cfg->db_path);
    struct stat st;
    if (stat(dir, &st) != 0)
        return sv_error_set(err, -EINVAL, "db.path: %s: directory %s: %s", cfg->db_path, dir,
                            strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sv_error_set(err, -EINVAL, "db.path: %s: %s is not a directory", cfg->db_path,
                            dir);
    /* run creates the lock file and the WAL beside the database, and writes the database
     * (check said OK for a read-only directory that run refused) */
    if (access(dir, W_OK | X_OK) != 0)
        return sv_error_set(err, -EINVAL, "db.path: %s: directory %s is not writable: %s",
                            cfg->db_path, dir, strerror(errno));
    if (access(cfg->db_path, F_OK) == 0 && access(cfg->db_path, R_OK | W_OK) != 0)
        return sv_error_set(err, -EINVAL, "db.path: %s: %s", cfg->db_path, strerror(errno));
    return 0;
}

/* What a run would apply, one line per node: "node n1: vless on port 443, 2 users, REALITY"
 * (ag_check_describe()), after a warning for each of its ports another process holds. */
static void check_summary(const ag_fleet *fleet, const sv_spec *spec, const char *path)
{
    for (size_t i = 0; i < fleet->n; i++) {
        const ag_node_state *n = &fleet->nodes[i];
        const sv_inbound_spec *in = NULL;
        char what[SV_TAG_MAX + 16], security[96] = "";
        for (size_t k = 0; in == NULL && k < spec->n_inbounds; k++)
            if (strcmp(spec->inbounds[k].tag, n->tag) == 0)
                in = &spec->inbounds[k];
        if (in != NULL) {
            snprintf(what, sizeof what, "node %s: listen", n->tag);
            ag_check_warn_bind(what, in->bind.address, in->bind.port, in->udp, path);
            security[0] = ',';
            security[1] = ' ';
            ag_check_describe(in, security + 2, sizeof security - 2);
        }
        printf("node %s: %s on port %u, %zu user%s%s\n", n->tag, n->node.protocol,
               (unsigned)n->node.server_port, n->users.n, n->users.n == 1 ? "" : "s", security);
    }
    fflush(stdout);
}

static void on_check_fetched(void *arg, int status, ag_fleet *fleet, const sv_error *err)
{
    check_ctx *c = arg;
    sv_spec spec;
    c->done = true;
    c->status = status;
    if (status != 0) {
        c->err = *err;
        return;
    }
    c->status = ag_lower_fleet(fleet, &spec, &c->err);
    if (c->status != 0)
        return;
    c->status = sv_check(&spec, &c->err);
    for (size_t i = 0; c->status == 0 && i < fleet->n; i++) { /* run binds them */
        char what[SV_TAG_MAX + 32];
        snprintf(what, sizeof what, "node %s: the panel's listen_ip", fleet->nodes[i].tag);
        if (fleet->nodes[i].listen == NULL) /* the config's was checked first */
            c->status = check_listen_ip(ag_node_listen(&fleet->nodes[i]), what, &c->err);
    }
    if (c->status == 0)
        check_summary(fleet, &spec, c->path);
    sv_spec_free(&spec);
}

/* `katana check`: a remote panel node gets a real client that fetches the panel
 * once on the check's loop; nothing is stored, pushed or bound. */
static int check_client(void *arg, const ag_node_config *nc, pn_client **out, sv_error *err)
{
    pn_remote_options o = {.loop = arg,
                           .type = ag_panel_type_name(nc->panel.type),
                           .url = nc->panel.url, .token = nc->panel.token,
                           .node_id = nc->panel.node_id, .node_type = nc->panel.node_type,
                           .timeout_ms = 1000L * nc->panel.timeout_s,
                           .pull_interval = nc->panel.pull_interval_s,
                           .push_interval = nc->panel.push_interval_s,
                           .machine_id = nc->panel.machine_id};
    int rc = pn_remote_new(&o, out, err);
    if (rc != 0) {
        sv_error inner = *err;
        sv_error_set(err, rc, "node %s: %s", nc->tag, inner.msg);
    }
    return rc;
}

/* An Xboard machine entry: panel.machine_id without a node_id. */
static bool is_machine_entry(const ag_node_config *nc)
{
    return nc->panel.type == AG_PANEL_XBOARD && nc->panel.machine_id != NULL &&
           nc->panel.node_id == NULL;
}

/* Nodes check does not fetch are moved past cfg->n_nodes (restored by the caller from
 * @p n_all) and named on stdout: with --offline every remote panel node and machine entry.
 * @return how many nodes remain to fetch. */
static size_t check_offline(ag_config *cfg, bool offline)
{
    size_t k = 0;
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        if (cfg->nodes[i].panel.type == AG_PANEL_LOCAL || !offline) {
            ag_node_config t = cfg->nodes[k];
            cfg->nodes[k++] = cfg->nodes[i];
            cfg->nodes[i] = t;
        }
    }
    for (size_t i = k; i < cfg->n_nodes; i++)
        printf("node %s: %s panel not contacted (--offline)\n", cfg->nodes[i].tag,
               ag_panel_type_name(cfg->nodes[i].panel.type));
    return k;
}

typedef struct machine_check {
    bool done;
    int rc;
    pn_xb_machine list;
    sv_error err;
} machine_check;

static void on_check_machine(int rc, pn_xb_machine *l, const sv_error *err, void *arg)
{
    machine_check *mc = arg;
    mc->done = true;
    mc->rc = rc;
    if (rc == 0) {
        mc->list = *l;
        memset(l, 0, sizeof *l);
    } else {
        mc->err = *err;
    }
}

/* Fetch the node list of machine entry @p entry once (POST machine/nodes) on @p loop, print it,
 * and append one node config per listed node of a type katana serves to @p v (@p n, @p cap),
 * the way `run` makes them (ag_machine_node_config). 0 or an error (err set). */
static int check_machine(uv_loop_t *loop, const ag_node_config *entry, ag_node_config **v,
                         size_t *n, size_t *cap, sv_error *err)
{
    pn_xb_machine_options o = {.loop = loop, .url = entry->panel.url,
                               .token = entry->panel.token,
                               .machine_id = entry->panel.machine_id,
                               .timeout_ms = 1000L * entry->panel.timeout_s};
    pn_xb_machine_client *client = NULL;
    machine_check mc = {0};
    int rc = pn_xb_machine_new(&o, &client, err);
    if (rc == 0 && (rc = pn_xb_machine_fetch(client, on_check_machine, &mc)) == 0) {
        while (!mc.done && uv_run(loop, UV_RUN_ONCE) != 0) {
        }
        rc = mc.done ? mc.rc : -ETIMEDOUT;
        if (rc != 0)
            sv_error_set(err, rc, "%s", mc.done ? mc.err.msg : "no answer");
    } else if (rc != 0 && client != NULL) {
        sv_error_set(err, rc, "machine/nodes request not started");
    }
    pn_xb_machine_client_free(client);
    if (rc != 0) {
        sv_error inner = *err;
        return sv_error_set(err, rc, "node %s: machine %s: %s", entry->tag,
                            entry->panel.machine_id, inner.msg);
    }
    printf("node %s: machine %s lists %zu nodes\n", entry->tag, entry->panel.machine_id,
           mc.list.n);
    for (size_t i = 0; rc == 0 && i < mc.list.n; i++) {
        const pn_xb_machine_node *mn = &mc.list.nodes[i];
        if (!ag_machine_type_served(mn->type)) {
            printf("node %s-%" PRIu64 ": type %s not served, skipped\n", entry->tag, mn->id,
                   mn->type);
            continue;
        }
        if (*n == *cap) {
            size_t c = *cap > 0 ? 2 * *cap : 8;
            ag_node_config *p = realloc(*v, c * sizeof *p);
            if (p == NULL) {
                rc = sv_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            *v = p;
            *cap = c;
        }
        rc = ag_machine_node_config(entry, mn->id, mn->type, &(*v)[(*n)++], err);
    }
    pn_xb_machine_free(&mc.list);
    return rc;
}

/* Replace every machine entry of @p cfg by the nodes its panel lists now (check
 * fetches what run would serve). 0 or an error (err set; @p cfg stays valid for freeing). */
static int check_machines(uv_loop_t *loop, ag_config *cfg, sv_error *err)
{
    ag_node_config *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < cfg->n_nodes && rc == 0; i++) {
        if (is_machine_entry(&cfg->nodes[i])) {
            rc = check_machine(loop, &cfg->nodes[i], &v, &n, &cap, err);
            continue;
        }
        if (n == cap) {
            size_t c = cap > 0 ? 2 * cap : 8;
            ag_node_config *p = realloc(v, c * sizeof *p);
            if (p == NULL) {
                rc = sv_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            v = p;
            cap = c;
        }
        v[n++] = cfg->nodes[i];
        memset(&cfg->nodes[i], 0, sizeof cfg->nodes[i]);
    }
    for (size_t i = 0; i < cfg->n_nodes; i++)
        ag_node_config_free(&cfg->nodes[i]);
    free(cfg->nodes);
    cfg->nodes = v;
    cfg->n_nodes = n;
    return rc;
}

int ag_cmd_check(const char *path, bool offline)
{
    ag_config cfg;
    check_ctx c = {.done = true, .path = path};
    uv_loop_t loop;
    if (ag_config_load_file(path, &cfg, &c.err) != 0)
        goto invalid;
    if (check_local(&cfg, path, &c.err) != 0) {
        ag_config_free(&cfg);
        goto invalid;
    }
    sv_log_threshold = cfg.log_level;
    if (uv_loop_init(&loop) != 0) {
        ag_config_free(&cfg);
        fprintf(stderr, "katana: cannot create an event loop\n");
        return 1;
    }
    /* the callback may run before ag_fetch returns: its verdict is c.status, not rc */
    ag_remote_source remote = {.client = check_client, .arg = &loop};
    int rc = offline ? 0 : check_machines(&loop, &cfg, &c.err);
    if (rc != 0) {
        ag_config_free(&cfg);
        uv_run(&loop, UV_RUN_DEFAULT); /* the machine client's closes */
        uv_loop_close(&loop);
        goto invalid;
    }
    size_t n_all = cfg.n_nodes;
    cfg.n_nodes = check_offline(&cfg, offline);
    if (cfg.n_nodes > 0) {
        c.done = false;
        rc = ag_fetch(&loop, &cfg, NULL, offline ? NULL : &remote, on_check_fetched, &c, &c.err);
    }
    cfg.n_nodes = n_all;
    ag_config_free(&cfg);
    if (rc == 0)
        uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (rc != 0 || c.status != 0 || !c.done)
        goto invalid;
    puts("Configuration OK.");
    return 0;
invalid:
    fprintf(stderr, "configuration invalid: %s\n",
            c.err.msg[0] != '\0' ? c.err.msg : "the panel never answered");
    return 1;
}

int main(int argc, char **argv)
{
    return ag_cli_main(argc, argv); /* agent/cli.c */
}
