/* Intrusive doubly linked list: a zeroed node is unlinked; unlink nulls the node. */
#ifndef SV_UTIL_LIST_H
#define SV_UTIL_LIST_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sv_list {
    struct sv_list *next, *prev;
} sv_list;

#define sv_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/** Make @p head an empty list (a sentinel pointing at itself). */
static inline void sv_list_init(sv_list *head) { head->next = head->prev = head; }

/** True when @p head has no elements. */
static inline bool sv_list_is_empty(const sv_list *head) { return head->next == head; }

/** True when @p node is in some list (zeroed nodes are not). */
static inline bool sv_list_is_linked(const sv_list *node) { return node->next != NULL; }

/** Append @p node (must be unlinked) before @p head, i.e. at the tail. */
static inline void sv_list_insert_tail(sv_list *head, sv_list *node)
{
    assert(!sv_list_is_linked(node));
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

/** Remove @p node from its list and zero its links. */
static inline void sv_list_unlink(sv_list *node)
{
    assert(sv_list_is_linked(node));
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->next = node->prev = NULL;
}

#define sv_list_foreach_safe(pos, tmp, head)                                                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
