#include "config.h"

#include <stdio.h>

int main(void)
{
    puts("katana " PACKAGE_VERSION);
    return 0;
}
