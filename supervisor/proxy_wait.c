/* Sockets waiting for their PROXY protocol header (proxy_wait.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/admission.h"
#include "supervisor/bounds.h"
#include "supervisor/conn.h"
#include "supervisor/plane.h"
#include "supervisor/proxy_wait.h"
#include "supervisor/util/log.h"
#include "supervisor/util/proxy_header.h"

#define MOD "sv.listener"

typedef struct proxy_wait {
    sv_list link; /* in sv_worker.proxy_waits, oldest first */
    sv_wlistener *l; /* held (n_users_of) until the wait ends */
    int fd;          /* owned until handed to the connection or closed */
    uv_poll_t poll;
    uv_timer_t timer;
    int open_handles;
    size_t len;
    uint8_t buf[SV_PROXY_READ_MAX];
} proxy_wait;

static void on_wait_handle_closed(uv_handle_t *h)
{
    proxy_wait *pw = h->data;
    if (--pw->open_handles == 0) {
        sv__wlistener_release(pw->l);
        free(pw);
    }
}

/* The wait ends: its handles close (the poll's first, which takes the socket off the loop at
 * once, so the connection's own handle may take it next), and it leaves the worker's list. */
static void wait_end(proxy_wait *pw)
{
    sv_worker *w = pw->l->w;
    sv_list_unlink(&pw->link);
    w->n_proxy_waits--;
    uv_close((uv_handle_t *)&pw->poll, on_wait_handle_closed);
    uv_close((uv_handle_t *)&pw->timer, on_wait_handle_closed);
}

static void wait_fail(proxy_wait *pw, const char *why)
{
    SV_LOG(SV_LOG_DEBUG, MOD, "inbound %s: connection closed before it opened: %s",
           pw->l->handler->tag, why);
    int fd = pw->fd;
    wait_end(pw); /* off the loop first, then the descriptor may go */
    close(fd);
}

/* The header is whole: the connection opens with its client and the bytes past it. */
static void wait_done(proxy_wait *pw, size_t header_len, const sv_proxy_info *pi)
{
    sv_wlistener *l = pw->l;
    int fd = pw->fd;
    pw->fd = -1;
    wait_end(pw); /* pw stays allocated until its close callbacks: buf is still ours */
    if (l->stopped || l->w->exiting) {
        close(fd);
        return;
    }
    const struct sockaddr *peer = pi->local ? NULL : (const struct sockaddr *)&pi->src;
    if (sv__conn_open(l, fd, peer, pw->buf + header_len, pw->len - header_len) == 0)
        sv__admit_accepted(l->w);
}

static void on_wait_readable(uv_poll_t *p, int status, int events)
{
    proxy_wait *pw = p->data;
    (void)events;
    if (status < 0) {
        wait_fail(pw, uv_strerror(status));
        return;
    }
    ssize_t n = recv(pw->fd, pw->buf + pw->len, sizeof pw->buf - pw->len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        wait_fail(pw, n == 0 ? "the client ended before its PROXY header" : strerror(errno));
        return;
    }
    pw->len += (size_t)n;
    sv_proxy_info pi;
    const char *why = "PROXY header longer than the bound";
    long h = sv_proxy_header_parse(pw->buf, pw->len, &pi, &why);
    if (h > 0)
        wait_done(pw, (size_t)h, &pi);
    else if (h < 0 || pw->len == sizeof pw->buf)
        wait_fail(pw, why);
}

static void on_wait_timeout(uv_timer_t *t)
{
    wait_fail(t->data, "no whole PROXY header in time");
}

int sv__proxy_wait_start(sv_wlistener *l, int fd)
{
    sv_worker *w = l->w;
    if (w->n_proxy_waits >= SV_PROXY_WAITS_MAX) /* the oldest makes room */
        wait_fail(sv_container_of(w->proxy_waits.next, proxy_wait, link),
                  "too many connections waiting for their PROXY header");
    proxy_wait *pw = calloc(1, sizeof *pw); /* links zeroed: not in a list yet */
    if (pw == NULL) {
        close(fd);
        return -ENOMEM;
    }
    pw->l = l;
    pw->fd = fd;
    if (uv_poll_init(&w->loop, &pw->poll, fd) != 0) {
        free(pw);
        close(fd);
        return 0; /* this socket only: accepting goes on */
    }
    l->n_users_of++;
    pw->open_handles = 2;
    pw->poll.data = pw;
    uv_timer_init(&w->loop, &pw->timer);
    pw->timer.data = pw;
    sv_list_insert_tail(&w->proxy_waits, &pw->link);
    w->n_proxy_waits++;
    uv_poll_start(&pw->poll, UV_READABLE, on_wait_readable);
    uv_timer_start(&pw->timer, on_wait_timeout, SV_PROXY_WAIT_MS, 0);
    return 0;
}

void sv__proxy_waits_close_all(sv_worker *w)
{
    while (!sv_list_is_empty(&w->proxy_waits))
        wait_fail(sv_container_of(w->proxy_waits.next, proxy_wait, link), "the worker stops");
}
