/*
 * Internal destinations ("Proxy users can reach the node itself"): the address classes
 * a user's flow may not reach by default (loopback, private, link-local, shared, unspecified,
 * multicast, reserved and broadcast, also in IPv6 forms that embed an IPv4 address), and the
 * set of the node's own addresses. The classification and the refusal rule are pure; only
 * sv_addrset_from_host() reads the system (getifaddrs).
 */
#ifndef SV_NETCLASS_H
#define SV_NETCLASS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/** What an address is. Every class but SV_ADDR_PUBLIC is internal. */
enum sv_addr_class {
    SV_ADDR_PUBLIC = 0,
    SV_ADDR_UNSPECIFIED, /**< 0.0.0.0/8, ::/128 */
    SV_ADDR_LOOPBACK,    /**< 127.0.0.0/8, ::1/128 */
    SV_ADDR_PRIVATE,     /**< 10/8, 172.16/12, 192.168/16 (RFC 1918); fc00::/7 (ULA), fec0::/10 */
    SV_ADDR_SHARED,      /**< 100.64.0.0/10 (RFC 6598, carrier-grade NAT) */
    SV_ADDR_LINK_LOCAL,  /**< 169.254.0.0/16, fe80::/10 */
    SV_ADDR_MULTICAST,   /**< 224.0.0.0/4, ff00::/8 */
    SV_ADDR_RESERVED,    /**< 240.0.0.0/4, which holds the broadcast address 255.255.255.255 */
};

/**
 * Classify one address. IPv6 forms that carry an IPv4 address are classified by that address:
 * IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d (other than :: and ::1), NAT64
 * 64:ff9b::a.b.c.d (RFC 6052) and 6to4 2002:AABB:CCDD::/48 (RFC 3056).
 * @param family  AF_INET or AF_INET6 (anything else is SV_ADDR_PUBLIC)
 * @param addr    4 or 16 bytes in network order
 */
enum sv_addr_class sv_addr_classify(int family, const uint8_t *addr);

/** An address in one comparable form: IPv4 as the mapped IPv6 address ::ffff:a.b.c.d. */
typedef struct sv_ip16 {
    uint8_t b[16];
} sv_ip16;

/** @p addr (4 bytes for AF_INET, 16 for AF_INET6) as an sv_ip16. false for another family. */
bool sv_ip16_from(int family, const uint8_t *addr, sv_ip16 *out);

/** The address of a sockaddr_in / sockaddr_in6. false for another family or NULL. */
bool sv_ip16_from_sockaddr(const struct sockaddr *sa, sv_ip16 *out);

/**
 * The node's own addresses: immutable once built, reference-counted, shared by the workers
 * ("the node's own addresses" are refused like the internal classes).
 */
typedef struct sv_addrset {
    _Atomic int refs;
    size_t n;
    sv_ip16 v[]; /**< sorted, without duplicates */
} sv_addrset;

/**
 * A set of @p n addresses (copied, sorted, duplicates dropped) with one reference.
 * @return the set, or NULL on allocation failure.
 */
sv_addrset *sv_addrset_new(const sv_ip16 *v, size_t n);

/** Take / drop a reference (any thread); the last unref frees the set. NULL-safe. */
void sv_addrset_ref(sv_addrset *s);
void sv_addrset_unref(sv_addrset *s);

/** Is @p ip in @p s? NULL @p s is the empty set. Binary search, no allocation. */
bool sv_addrset_has(const sv_addrset *s, const sv_ip16 *ip);

/** Same members? NULL is the empty set. */
bool sv_addrset_equal(const sv_addrset *a, const sv_addrset *b);

/**
 * The host's own addresses: every IPv4/IPv6 address and IPv4 broadcast address of every
 * interface (getifaddrs), plus the IP literals in @p extra (the inbounds' listen addresses;
 * entries that do not parse are skipped).
 * @param out  receives a set with one reference
 * @return 0, -ENOMEM, or the negative errno of getifaddrs (then *out is NULL).
 */
int sv_addrset_from_host(const char *const *extra, size_t n_extra, sv_addrset **out);

/**
 * The connector's rule: may a user flow dial @p ip? It may not when it is internal
 * (sv_addr_classify() is not SV_ADDR_PUBLIC) or one of the node's own addresses (@p own, may
 * be NULL), unless the node allows private destinations (`allow_private`) or the route rule
 * that chose the outbound named the destination itself (sv_decision.names_dest).
 * @return true when the flow must be refused like a blocked route.
 */
bool sv_dest_refused(bool allow_private, bool names_dest, const sv_ip16 *ip, const sv_addrset *own);

#endif
