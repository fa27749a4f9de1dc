/*
 * The socket policy of a direct outbound (seed 001 "socket 策略"):
 * applied to every socket the outbound opens, and tried once on a scratch socket at prepare so
 * that what the host refuses (an address it does not have, an interface it does not know, a
 * capability the process lacks) refuses the spec at apply instead of failing the first flow.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/outbound/outbound.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

/* The steps of sv_socket_policy_apply, named for the errors of sv_socket_policy_check. */
enum sp_step { SP_MARK = 1, SP_DEVICE, SP_KEEPALIVE, SP_BIND };

bool sv_socket_policy_source(const sv_socket_policy *p, int family, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    ss->ss_family = (sa_family_t)family;
    if (p == NULL)
        return false;
    if (family == AF_INET && p->has_addr4) {
        memcpy(&((struct sockaddr_in *)ss)->sin_addr, p->addr4, 4);
        return true;
    }
    if (family == AF_INET6 && p->has_addr6) {
        memcpy(&((struct sockaddr_in6 *)ss)->sin6_addr, p->addr6, 16);
        return true;
    }
    return false;
}

static int set_int(int fd, int level, int name, int v)
{
    return setsockopt(fd, level, name, &v, sizeof v) == 0 ? 0 : -errno;
}

/* Apply @p p to @p fd step by step; @p step gets the one that failed. */
static int apply_steps(const sv_socket_policy *p, int fd, int family, bool stream,
                       enum sp_step *step)
{
    int rc = 0;
    *step = SP_MARK;
    if (p->mark != 0 && setsockopt(fd, SOL_SOCKET, SO_MARK, &p->mark, sizeof p->mark) != 0)
        return -errno;
    *step = SP_DEVICE;
    if (p->interface[0] != '\0' &&
        setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, p->interface,
                   (socklen_t)strnlen(p->interface, SV_IFNAME_MAX)) != 0)
        return -errno;
    *step = SP_KEEPALIVE;
    if (stream && p->keepalive_idle_s != 0) {
        rc = set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
        if (rc == 0)
            rc = set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, (int)p->keepalive_idle_s);
        if (rc == 0 && p->keepalive_interval_s != 0)
            rc = set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, (int)p->keepalive_interval_s);
        if (rc == 0 && p->keepalive_count != 0)
            rc = set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, (int)p->keepalive_count);
        if (rc != 0)
            return rc;
    }
    *step = SP_BIND;
    struct sockaddr_storage ss;
    if (stream && sv_socket_policy_source(p, family, &ss)) {
        /* The port is chosen at connect, per destination: many flows share one source address
         * without exhausting the ephemeral ports. */
        (void)set_int(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1);
        socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in)
                                          : sizeof(struct sockaddr_in6);
        if (bind(fd, (struct sockaddr *)&ss, len) != 0)
            return -errno;
    }
    return 0;
}

int sv_socket_policy_apply(const sv_socket_policy *p, int fd, int family, bool stream)
{
    enum sp_step step;
    return p == NULL ? 0 : apply_steps(p, fd, family, stream, &step);
}

/* One family's scratch stream socket under the whole policy; 0, or -EINVAL with @p err set. */
static int check_family(const sv_socket_policy *p, const char *tag, int family, sv_error *err)
{
    char addr[INET6_ADDRSTRLEN] = "";
    inet_ntop(family, family == AF_INET ? (const void *)p->addr4 : (const void *)p->addr6, addr,
              sizeof addr);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        if ((family == AF_INET && !p->has_addr4) || (family == AF_INET6 && !p->has_addr6))
            return -EAFNOSUPPORT; /* the caller tries the other family */
        return sv_error_set(err, -EINVAL, "outbound %s: bind address %s: no %s socket: %s", tag,
                            addr, family == AF_INET ? "IPv4" : "IPv6", strerror(errno));
    }
    enum sp_step step;
    int rc = apply_steps(p, fd, family, true, &step);
    close(fd);
    if (rc == 0)
        return 0;
    bool perm = rc == -EPERM || rc == -EACCES;
    switch (step) {
    case SP_MARK:
        if (perm)
            return sv_error_set(err, -EINVAL, "outbound %s: mark %u: SO_MARK needs "
                                "CAP_NET_ADMIN, which this process lacks", tag, p->mark);
        return sv_error_set(err, -EINVAL, "outbound %s: mark %u: %s", tag, p->mark,
                            strerror(-rc));
    case SP_DEVICE:
        if (perm)
            return sv_error_set(err, -EINVAL, "outbound %s: interface %s: SO_BINDTODEVICE needs "
                                "CAP_NET_RAW, which this process lacks", tag, p->interface);
        return sv_error_set(err, -EINVAL, "outbound %s: interface %s: %s", tag, p->interface,
                            rc == -ENODEV ? "no such interface on this host" : strerror(-rc));
    case SP_KEEPALIVE:
        return sv_error_set(err, -EINVAL, "outbound %s: keepalive: %s", tag, strerror(-rc));
    case SP_BIND:
        if (rc == -EADDRNOTAVAIL)
            return sv_error_set(err, -EINVAL, "outbound %s: bind address %s is not an address "
                                "of this host", tag, addr);
        return sv_error_set(err, -EINVAL, "outbound %s: bind address %s: %s", tag, addr,
                            strerror(-rc));
    }
    return sv_error_set(err, -EINVAL, "outbound %s: %s", tag, strerror(-rc));
}

int sv_socket_policy_check(const sv_socket_policy *p, const char *tag, sv_error *err)
{
    if (p->interface[0] != '\0' && if_nametoindex(p->interface) == 0)
        return sv_error_set(err, -EINVAL, "outbound %s: interface %s: no such interface on "
                            "this host", tag, p->interface);
    int rc = 0;
    bool tried = false;
    if (p->has_addr4 || !p->has_addr6) {
        rc = check_family(p, tag, AF_INET, err);
        tried = rc != -EAFNOSUPPORT;
    }
    if ((rc == 0 || rc == -EAFNOSUPPORT) && (p->has_addr6 || !tried))
        rc = check_family(p, tag, AF_INET6, err);
    if (rc == -EAFNOSUPPORT)
        return sv_error_set(err, -EINVAL, "outbound %s: no socket can be opened to check its "
                            "socket policy", tag);
    return rc;
}
