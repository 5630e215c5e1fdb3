/* placeholder until the trainer CLI lands */
int main(void)
{
	return 1;
}
