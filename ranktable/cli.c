/* placeholder until the rank-table CLI lands */
int main(void)
{
	return 1;
}
