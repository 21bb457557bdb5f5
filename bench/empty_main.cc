// Does nothing: its run time is what process start-up with the CLI's libraries costs.
int main() { return 0; }
