from calendarx.days import add_days, day_of_year, days_in_month, is_leap

__all__ = ["is_leap", "days_in_month", "day_of_year", "add_days"]
