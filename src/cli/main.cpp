#include <cstdio>
int main() { std::puts("leantrain: CLI not built yet"); return 0; }
