/*
 * Unit tests: node manager (agent/node.c) — fetch through the local panel, then the reconcile
 * decision: full apply, users-only edit (sv_set_users), closing sessions after a transport
 * change, refusals that keep the running state. The supervisor's command functions are
 * replaced by recorders below (the real runtime is exercised by the integration tests).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/node.h"
#include "supervisor/util/log.h"

/* ------------------------------------------------------------------------------------------ */
/* Recording supervisor                                                                         */
/* ------------------------------------------------------------------------------------------ */

static struct {
    int applies, set_users, closes;
    bool allow_disruptive;
    sv_spec last_spec;
    char users_tag[64];
    size_t users_n;
    char closed_inbound[64];
    int apply_rc; /* what the next sv_apply returns */
} rec;

int sv_apply(sv_supervisor *sv, const sv_spec *spec, const sv_apply_options *opts,
             sv_apply_report *report, sv_error *err)
{
    if (rec.apply_rc != 0)
        return sv_error_set(err, rec.apply_rc, "inbound x: binding 127.0.0.1:1 failed: test");
    rec.applies++;
    rec.allow_disruptive = opts->allow_disruptive;
    sv_spec_free(&rec.last_spec);
    assert_int_equal(sv_spec_clone(&rec.last_spec, spec), 0);
    if (report != NULL)
        memset(report, 0, sizeof *report);
    return 0;
}

int sv_apply_take(sv_supervisor *sv, sv_spec *spec, const sv_apply_options *opts,
                  sv_apply_report *report, sv_error *err)
{
    int rc = sv_apply(sv, spec, opts, report, err);
    if (rc == 0) { /* taken: the running spec now */
        sv_spec_free(spec);
        memset(spec, 0, sizeof *spec);
    }
    return rc;
}

int sv_set_users(sv_supervisor *sv, const char *set_tag, const sv_user *users, size_t n_users,
                 sv_error *err)
{
    rec.set_users++;
    snprintf(rec.users_tag, sizeof rec.users_tag, "%s", set_tag);
    rec.users_n = n_users;
    /* what runs now, for sv_running_user_set() */
    for (size_t i = 0; i < rec.last_spec.n_user_sets; i++) {
        sv_user_set *set = &rec.last_spec.user_sets[i];
        if (strcmp(set->tag, set_tag) != 0)
            continue;
        sv_user_set given = {.tag = (char *)set_tag, .users = (sv_user *)users, .n_users = n_users};
        sv_user_set_free(set);
        assert_int_equal(sv_user_set_clone(set, &given), 0);
    }
    return 0;
}

int sv_set_users_take(sv_supervisor *sv, sv_user_set *set, sv_error *err)
{
    int rc = sv_set_users(sv, set->tag, set->users, set->n_users, err);
    sv_user_set_free(set);
    return rc;
}

const sv_user_set *sv_running_user_set(sv_supervisor *sv, const char *set_tag)
{
    (void)sv;
    return sv_spec_user_set(&rec.last_spec, set_tag);
}

int sv_reload_certs(sv_supervisor *sv, sv_error *err)
{
    (void)sv;
    (void)err;
    return 0;
}

size_t sv_close(sv_supervisor *sv, const sv_selector *sel)
{
    rec.closes++;
    assert_int_equal(sel->kind, SV_SELECT_INBOUND);
    snprintf(rec.closed_inbound, sizeof rec.closed_inbound, "%s", sel->inbound);
    return 0;
}

uint64_t sv_epoch(sv_supervisor *sv)
{
    return (uint64_t)rec.applies;
}

bool sv_inbound_cert_expiry(sv_supervisor *sv, const char *tag, int64_t *not_after)
{
    (void)sv, (void)tag, (void)not_after;
    return false; /* the stand-in serves no certificate */
}

/* A node checked alone after its fleet was refused (issue 33): the recorder's apply_rc stands
 * for a conflict of the whole, so each node alone passes. */
int sv_validate(const sv_spec *spec, sv_error *err)
{
    (void)spec;
    (void)err;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Fixture: a config whose node and users live in files of a temporary directory                */
/* ------------------------------------------------------------------------------------------ */

typedef struct fx {
    char dir[64];
    char node[96], users[96];
    ag_config cfg;
    ag_manager *m;
    int loads, status;
    sv_error err;
} fx;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    char cfg[512];
    sv_error err = {0};
    memset(&rec, 0, sizeof rec);
    snprintf(f->dir, sizeof f->dir, "/tmp/katana-test-node-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->node, sizeof f->node, "%s/node.json", f->dir);
    snprintf(f->users, sizeof f->users, "%s/users.json", f->dir);
    write_file(f->node, "{\"server_port\":8388,\"cipher\":\"aes-256-gcm\"}");
    write_file(f->users, "{\"users\":[{\"id\":1,\"uuid\":\"one\"}]}");
    snprintf(cfg, sizeof cfg, "{\"nodes\":[{\"tag\":\"demo\",\"panel\":{\"type\":\"local\","
             "\"node_file\":\"node.json\",\"users_file\":\"users.json\"}}]}");
    assert_int_equal(ag_config_parse(cfg, strlen(cfg), f->dir, &f->cfg, &err), 0);
    assert_int_equal(ag_manager_new(NULL, NULL, NULL, &f->m), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    ag_manager_free(f->m);
    ag_config_free(&f->cfg);
    unlink(f->node);
    unlink(f->users);
    rmdir(f->dir);
    sv_spec_free(&rec.last_spec);
    free(f);
    return 0;
}

static void on_load(void *arg, int status, const sv_error *err)
{
    fx *f = arg;
    f->loads++;
    f->status = status;
    if (err != NULL)
        f->err = *err;
}

/* Run one load; the local panel completes it before ag_manager_load returns. */
static int load(fx *f)
{
    sv_error err = {0};
    int before = f->loads;
    assert_int_equal(ag_manager_load(f->m, &f->cfg, on_load, f, &err), 0);
    assert_int_equal(f->loads, before + 1);
    assert_false(ag_manager_busy(f->m));
    return f->status;
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void node__first_load__applies_the_whole_spec(void **state)
{
    fx *f = *state;
    assert_int_equal(load(f), 0);
    assert_int_equal(rec.applies, 1);
    assert_true(rec.allow_disruptive);
    assert_int_equal(rec.last_spec.n_inbounds, 1);
    assert_string_equal(rec.last_spec.inbounds[0].tag, "demo");
    assert_int_equal(rec.last_spec.inbounds[0].bind.port, 8388);
    assert_int_equal(rec.last_spec.user_sets[0].n_users, 1);
    assert_int_equal(ag_manager_running(f->m)->n, 1);
    assert_int_equal(rec.set_users + rec.closes, 0);
}

static void node__users_only_change__edits_users(void **state)
{
    fx *f = *state;
    assert_int_equal(load(f), 0);
    write_file(f->users, "{\"users\":[{\"id\":1,\"uuid\":\"one\"},{\"id\":2,\"uuid\":\"two\"}]}");
    assert_int_equal(load(f), 0);
    assert_int_equal(rec.applies, 1); /* no second apply */
    assert_int_equal(rec.set_users, 1);
    assert_string_equal(rec.users_tag, "demo");
    assert_int_equal(rec.users_n, 2);
    assert_int_equal(ag_manager_running(f->m)->nodes[0].users.n, 2);
    /* Same files again: nothing to do. */
    assert_int_equal(load(f), 0);
    assert_int_equal(rec.applies + rec.set_users, 2);
}

static void node__route_change__reapplies_without_closing(void **state)
{
    fx *f = *state;
    assert_int_equal(load(f), 0);
    write_file(f->node, "{\"server_port\":8388,\"cipher\":\"aes-256-gcm\",\"routes\":"
                        "[{\"id\":1,\"match\":\"a.test\",\"action\":\"block\"}]}");
    assert_int_equal(load(f), 0);
    assert_int_equal(rec.applies, 2);
    assert_int_equal(rec.last_spec.route.n_rules, 1);
    assert_int_equal(rec.closes, 0);
}

static void node__transport_change__closes_the_nodes_sessions(void **state)
{
    fx *f = *state;
    assert_int_equal(load(f), 0);
    write_file(f->node, "{\"server_port\":8389,\"cipher\":\"aes-256-gcm\"}");
    assert_int_equal(load(f), 0);
    assert_int_equal(rec.applies, 2);
    assert_int_equal(rec.last_spec.inbounds[0].bind.port, 8389);
    assert_int_equal(rec.closes, 1);
    assert_string_equal(rec.closed_inbound, "demo");
}

static void node__bad_panel_data__keeps_the_running_state(void **state)
{
    fx *f = *state;
    assert_int_equal(load(f), 0);
    write_file(f->users, "{\"users\":[{\"id\":1}]}");
    assert_int_equal(load(f), -EINVAL);
    assert_non_null(strstr(f->err.msg, "node demo: users body "));
    assert_non_null(strstr(f->err.msg, "users[0].uuid: missing"));
    write_file(f->node, "{\"server_port\":1,\"cipher\":\"rc4-md5\"}");
    write_file(f->users, "{\"users\":[]}");
    assert_int_equal(load(f), -EINVAL);
    assert_string_equal(f->err.msg, "node demo: unsupported shadowsocks cipher \"rc4-md5\"");
    unlink(f->node);
    assert_int_equal(load(f), -ENOENT);
    assert_int_equal(rec.applies, 1);
    assert_int_equal(rec.set_users, 0);
    assert_int_equal(ag_manager_running(f->m)->nodes[0].node.server_port, 8388);
    assert_int_equal(ag_manager_running(f->m)->nodes[0].users.n, 1);
}

static void node__refused_apply__keeps_the_running_state(void **state)
{
    fx *f = *state;
    assert_int_equal(load(f), 0);
    write_file(f->node, "{\"server_port\":1,\"cipher\":\"aes-256-gcm\"}");
    rec.apply_rc = -EADDRINUSE;
    assert_int_equal(load(f), -EADDRINUSE);
    assert_string_equal(f->err.msg, "inbound x: binding 127.0.0.1:1 failed: test");
    assert_int_equal(ag_manager_running(f->m)->nodes[0].node.server_port, 8388);
    rec.apply_rc = 0;
    assert_int_equal(load(f), 0); /* the same change goes through once the port is free */
    assert_int_equal(ag_manager_running(f->m)->nodes[0].node.server_port, 1);
}

static void on_fetch(void *arg, int status, ag_fleet *fleet, const sv_error *err)
{
    int *calls = arg;
    (*calls)++;
    assert_int_equal(status, 0);
    assert_int_equal(fleet->n, 1);
    assert_string_equal(fleet->nodes[0].tag, "demo");
    assert_int_equal(fleet->nodes[0].users.n, 1);
}

static void node__fetch_alone__gives_the_fleet(void **state)
{
    fx *f = *state;
    int calls = 0;
    sv_error err = {0};
    assert_int_equal(ag_fetch(NULL, &f->cfg, NULL, NULL, on_fetch, &calls, &err), 0);
    assert_int_equal(calls, 1);
    assert_int_equal(rec.applies, 0);
}

/* Takes the fetched fleet (a node with a route the running one has not) into *arg. */
static void on_fetch_keep(void *arg, int status, ag_fleet *fleet, const sv_error *err)
{
    assert_int_equal(status, 0);
    *(ag_fleet *)arg = *fleet;
    memset(fleet, 0, sizeof *fleet);
}

/* Issue 13: the running fleet keeps no uuids once applied (the supervisor has the secrets). A
 * settings change with the users "not modified" (a copy of the shed list) lowers the secrets
 * of the running user set; a running set that is not the list held is refused, and nothing
 * changes. */
static void node__shed_users__are_refilled_from_the_running_set(void **state)
{
    fx *f = *state;
    sv_error err = {0};
    assert_int_equal(load(f), 0);
    const pn_users *held = &ag_manager_running(f->m)->nodes[0].users;
    assert_true(held->shed);
    assert_null(held->users); /* no speed limit of the node's own: nothing but the digest */
    assert_int_equal(held->n, 1);
    /* the same list from the panel is still "the same" */
    assert_int_equal(load(f), 0);
    assert_int_equal(rec.applies + rec.set_users, 1);

    write_file(f->node, "{\"server_port\":8388,\"cipher\":\"aes-256-gcm\",\"routes\":"
                        "[{\"id\":1,\"match\":\"a.test\",\"action\":\"block\"}]}");
    for (int round = 0; round < 2; round++) {
        ag_fleet next = {0};
        assert_int_equal(ag_fetch(NULL, &f->cfg, NULL, NULL, on_fetch_keep, &next, &err), 0);
        pn_users_free(&next.nodes[0].users); /* as on a "not modified" answer */
        assert_int_equal(pn_users_clone(&next.nodes[0].users, held), 0);
        if (round == 0) { /* what runs is not what is held (the set's secrets are one block:
                           * borrow another for a moment, then put the running one back) */
            static char other[] = "other";
            char *running = rec.last_spec.user_sets[0].users[0].secret;
            rec.last_spec.user_sets[0].users[0].secret = other;
            assert_int_equal(ag_manager_reconcile(f->m, &next, &err), -ESTALE);
            assert_int_equal(rec.applies, 1);
            rec.last_spec.user_sets[0].users[0].secret = running;
            assert_string_equal(running, "one");
        } else {
            assert_int_equal(ag_manager_reconcile(f->m, &next, &err), 0);
            assert_int_equal(rec.applies, 2);
            assert_int_equal(rec.last_spec.route.n_rules, 1);
            assert_string_equal(rec.last_spec.user_sets[0].users[0].secret, "one");
            held = &ag_manager_running(f->m)->nodes[0].users;
            assert_true(held->shed);
        }
        ag_fleet_free(&next);
    }
}

/* GET /v1/nodes for a uniproxy node (issue 4): type "uniproxy", the URL without the user info,
 * query and fragment of its config (the token is its own key and never appears). The load
 * itself fails (no uplink in this test), but the node is listed from the load's start. */
static void node__uniproxy_status__shows_the_url_without_secrets(void **state)
{
    fx *f = *state;
    ag_config cfg;
    sv_error err = {0};
    const char *text = "{\"db\":{\"path\":\"k.db\"},\"nodes\":[{\"tag\":\"up1\",\"panel\":"
                       "{\"type\":\"uniproxy\",\"url\":\"https://ops:pw@panel.example.com:8443"
                       "/base?key=s3cret#frag\",\"token\":\"tok-secret\",\"node_id\":3,"
                       "\"node_type\":\"shadowsocks\"}}]}";
    assert_int_equal(ag_config_parse(text, strlen(text), f->dir, &cfg, &err), 0);
    ag_manager_load(f->m, &cfg, on_load, f, &err); /* refused: no remote client source */
    api_node_status *st = NULL;
    long n = ag_manager_status(f->m, &st);
    assert_int_equal(n, 1);
    assert_string_equal(st[0].tag, "up1");
    assert_string_equal(st[0].panel_type, "uniproxy");
    assert_string_equal(st[0].panel_url, "https://panel.example.com:8443/base");
    assert_int_equal(st[0].last_push_ms, 0);
    assert_int_equal(st[0].outbox_pending_bytes, 0);
    free(st);
    ag_config_free(&cfg);
}

int main(void)
{
    sv_log_threshold = SV_LOG_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(node__first_load__applies_the_whole_spec, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(node__users_only_change__edits_users, setup, teardown),
        cmocka_unit_test_setup_teardown(node__route_change__reapplies_without_closing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(node__transport_change__closes_the_nodes_sessions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(node__bad_panel_data__keeps_the_running_state, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(node__refused_apply__keeps_the_running_state, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(node__fetch_alone__gives_the_fleet, setup, teardown),
        cmocka_unit_test_setup_teardown(node__shed_users__are_refilled_from_the_running_set,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(node__uniproxy_status__shows_the_url_without_secrets,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
