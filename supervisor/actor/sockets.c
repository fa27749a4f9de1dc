/*
 * The supervisor actor's listening sockets: one SO_REUSEPORT socket per worker and per network
 * for an inbound's bind address, bound in prepare so that a busy port refuses the spec.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/actor/actor.h"
#include "supervisor/util/holder.h"

static int parse_bind(const sv_bind *b, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, b->address, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(b->port);
        *len = sizeof *a4;
        return 0;
    }
    if (inet_pton(AF_INET6, b->address, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(b->port);
        *len = sizeof *a6;
        return 0;
    }
    return -EINVAL;
}

/* One SO_REUSEPORT socket bound to @p b. @return the fd or a negative errno. */
static int bind_socket(const sv_bind *b, int type)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_bind(b, &ss, &len) != 0)
        return -EINVAL;
    int fd = socket(ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (ss.ss_family == AF_INET6) {
        /* "::" serves IPv4 too; a specific IPv6 address serves only itself */
        int v6only = !IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

void sv__close_fds(staged_listener *s, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (s->tcp_fds[i] >= 0)
            close(s->tcp_fds[i]);
        if (s->udp_fds[i] >= 0)
            close(s->udp_fds[i]);
        s->tcp_fds[i] = s->udp_fds[i] = -1;
    }
}

int sv__bind_all(sv_supervisor *sv, staged_listener *s, const sv_inbound_spec *in, sv_error *err)
{
    unsigned n = sv->n_workers;
    for (unsigned i = 0; i < n; i++)
        s->tcp_fds[i] = s->udp_fds[i] = -1;
    /* SO_REUSEPORT would share the port with a stale second katana silently */
    struct sockaddr_storage ss;
    socklen_t len;
    char who[128];
    if (parse_bind(&in->bind, &ss, &len) == 0 &&
        (sv_addr_held_elsewhere((struct sockaddr *)&ss, SOCK_STREAM, who, sizeof who) != 0 ||
         (in->udp && sv_addr_held_elsewhere((struct sockaddr *)&ss, SOCK_DGRAM, who, sizeof who) != 0)))
        return sv_error_set(err, -EADDRINUSE, "inbound %s: binding %s failed: the port is held "
                            "by %s", in->tag, s->l.bind, who);
    for (unsigned i = 0; i < n; i++) {
        int fd = bind_socket(&in->bind, SOCK_STREAM);
        int ufd = fd >= 0 && in->udp ? bind_socket(&in->bind, SOCK_DGRAM) : -1;
        int rc = fd < 0 ? fd : (in->udp && ufd < 0 ? ufd : 0);
        if (fd >= 0)
            s->tcp_fds[i] = fd;
        if (ufd >= 0)
            s->udp_fds[i] = ufd;
        if (rc < 0) {
            sv__close_fds(s, n);
            return sv_error_set(err, rc, "inbound %s: binding %s failed: %s", in->tag, s->l.bind,
                                strerror(-rc));
        }
    }
    return 0;
}
