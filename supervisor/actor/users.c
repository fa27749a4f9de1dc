/*
 * The supervisor actor's user edits (seed 001 "user edits") and sv_close: a user set
 * replaced, one user upserted or removed, without a plan or a new plane.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor/actor.h"

/* User edits (seed 001 "user edits"): no plan, no new plane; only the inbounds admitting the
 * set get a new user table, and sessions of users no longer admitted are revoked. */
/* Replace set @p set_tag by a copy of @p users, or by @p take itself (zeroed, owned here). */
static int edit_users(sv_supervisor *sv, const char *set_tag, const sv_user_set *users,
                      sv_user_set *take, sv_error *err)
{
    sv_user_set taken = {0};
    if (take != NULL) {
        taken = *take;
        memset(take, 0, sizeof *take);
    }
    if (sv->shut || !sv->has_running) {
        sv_user_set_free(&taken);
        return sv_error_set(err, -ESHUTDOWN, "the supervisor has shut down");
    }
    if (sv_spec_user_set(&sv->running, set_tag) == NULL) {
        sv_error_set(err, -ENOENT, "user set %s: no such user set", set_tag);
        sv_user_set_free(&taken);
        return -ENOENT;
    }
    /* the running spec without the edited set's users, which are replaced anyway (a
     * copy of 50 000 users to be freed was a third of a reload that changes one) */
    sv_spec next;
    sv_user_set *edited = (sv_user_set *)sv_spec_user_set(&sv->running, set_tag);
    sv_user_set kept = *edited;
    edited->users = NULL;
    edited->n_users = 0;
    int rc = sv_spec_clone(&next, &sv->running);
    *edited = kept;
    if (rc != 0) {
        sv_user_set_free(&taken);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < next.n_user_sets; i++)
        if (strcmp(next.user_sets[i].tag, set_tag) == 0) {
            sv_user_set_free(&next.user_sets[i]);
            if (take != NULL) {
                next.user_sets[i] = taken; /* set tags are unique: taken once */
                memset(&taken, 0, sizeof taken);
            } else {
                rc = sv_user_set_clone(&next.user_sets[i], users);
            }
        }
    sv_user_set_free(&taken);
    if (rc != 0)
        sv_error_set(err, rc, "out of memory");
    if (rc == 0)
        rc = sv_validate(&next, err);
    prepared p = {0};
    sv_plan none = {0};
    if (rc == 0 && (p.ls = calloc(next.n_inbounds ? next.n_inbounds : 1, sizeof *p.ls)) == NULL)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < next.n_inbounds; i++)
        if (next.inbounds[i].users != NULL && strcmp(next.inbounds[i].users, set_tag) == 0 &&
            sv__running_listener(sv, next.inbounds[i].tag) != NULL)
            rc = sv__prepare_inbound(sv, &none, &next, &next.inbounds[i], &p, err);
    if (rc == 0 && sv__msgs_reserve(sv, p.n_ls * sv->n_workers) != 0)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        sv__publish_speed_limits(sv, &next); /* seed 001 "user edits": limits, then revoke and tables */
        for (size_t i = 0; i < p.n_ls; i++)
            sv__swap_with_policy(sv, &p.ls[i], &next, true);
        sv_spec_free(&sv->running);
        sv->running = next;
        memset(&next, 0, sizeof next);
    }
    sv__prepared_free(sv, &p, 0);
    sv_spec_free(&next);
    return rc;
}

int sv_set_users(sv_supervisor *sv, const char *set_tag, const sv_user *users, size_t n_users,
                 sv_error *err)
{
    sv_user_set set = {.tag = (char *)set_tag, .users = (sv_user *)users, .n_users = n_users};
    return edit_users(sv, set_tag, &set, NULL, err);
}

int sv_set_users_take(sv_supervisor *sv, sv_user_set *set, sv_error *err)
{
    char *tag = set->tag != NULL ? strdup(set->tag) : NULL;
    if (tag == NULL) {
        sv_user_set_free(set);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    int rc = edit_users(sv, tag, NULL, set, err);
    free(tag);
    return rc;
}

const sv_user_set *sv_running_user_set(sv_supervisor *sv, const char *set_tag)
{
    return sv->has_running ? sv_spec_user_set(&sv->running, set_tag) : NULL;
}

int sv_upsert_user(sv_supervisor *sv, const char *set_tag, const sv_user *user, sv_error *err)
{
    const sv_user_set *cur = sv->has_running ? sv_spec_user_set(&sv->running, set_tag) : NULL;
    if (cur == NULL)
        return sv_error_set(err, -ENOENT, "user set %s: no such user set", set_tag);
    sv_user *list = calloc(cur->n_users + 1, sizeof *list);
    if (list == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t n = 0;
    bool replaced = false;
    for (size_t i = 0; i < cur->n_users; i++) {
        list[n++] = cur->users[i].id == user->id ? *user : cur->users[i];
        replaced |= cur->users[i].id == user->id;
    }
    if (!replaced)
        list[n++] = *user;
    int rc = sv_set_users(sv, set_tag, list, n, err);
    free(list);
    return rc;
}

int sv_remove_user(sv_supervisor *sv, const char *set_tag, uint64_t id, sv_error *err)
{
    const sv_user_set *cur = sv->has_running ? sv_spec_user_set(&sv->running, set_tag) : NULL;
    if (cur == NULL)
        return sv_error_set(err, -ENOENT, "user set %s: no such user set", set_tag);
    sv_user *list = calloc(cur->n_users ? cur->n_users : 1, sizeof *list);
    if (list == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t n = 0, before = cur->n_users;
    for (size_t i = 0; i < cur->n_users; i++)
        if (cur->users[i].id != id)
            list[n++] = cur->users[i];
    int rc = n == before ? 0 : sv_set_users(sv, set_tag, list, n, err);
    free(list);
    return rc != 0 ? rc : (n < before ? 1 : 0);
}

size_t sv_close(sv_supervisor *sv, const sv_selector *sel)
{
    switch (sel->kind) {
    case SV_SELECT_SESSION:
        return sel->session ? sv_tracker_close_sessions(sv->shared.tracker, NULL, false, 0, sel->session) : 0;
    case SV_SELECT_USER:
        return sv_tracker_close_sessions(sv->shared.tracker, NULL, true, sel->user, 0);
    case SV_SELECT_INBOUND:
        return sel->inbound ? sv_tracker_close_sessions(sv->shared.tracker, sel->inbound, false, 0, 0) : 0;
    case SV_SELECT_ALL:
        return sv_tracker_close_sessions(sv->shared.tracker, NULL, false, 0, 0);
    }
    return 0;
}
